#include "scheduler/ui_assets.h"

namespace dgpu::scheduler {

// Defined in the files cmake/embed_text.cmake generates from web/ui/.
std::string_view UiIndexHtml();
std::string_view UiAppJs();
std::string_view UiStyleCss();

std::optional<UiAsset> FindUiAsset(std::string_view name) {
  if (name.empty() || name == "index.html")
    return UiAsset{UiIndexHtml(), "text/html; charset=utf-8"};
  if (name == "app.js") return UiAsset{UiAppJs(), "text/javascript; charset=utf-8"};
  if (name == "style.css") return UiAsset{UiStyleCss(), "text/css; charset=utf-8"};
  return std::nullopt;
}

}  // namespace dgpu::scheduler
