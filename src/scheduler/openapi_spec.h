// The OpenAPI description of the REST API (api/openapi.yaml), compiled into the binary by
// cmake/embed_text.cmake: the scheduler serves it without reading a file at run time.
#pragma once

#include <string_view>

namespace dgpu::scheduler {

// The YAML text, byte for byte as in api/openapi.yaml. Static storage; thread-safe.
std::string_view OpenApiYaml();

}  // namespace dgpu::scheduler
