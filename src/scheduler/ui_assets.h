// The web dashboard's files (web/ui/), compiled into the scheduler by cmake/embed_text.cmake and
// served at /ui/: nothing is read from disk or fetched from elsewhere at run time.
#pragma once

#include <optional>
#include <string_view>

namespace dgpu::scheduler {

struct UiAsset {
  std::string_view body;
  const char* content_type;
};

// The file `name` of /ui/<name> ("" is index.html); nullopt for any other name.
std::optional<UiAsset> FindUiAsset(std::string_view name);

}  // namespace dgpu::scheduler
