// Small helpers over SQLite's C API shared by the store's files.
#pragma once

#include <sqlite3.h>

#include <string>

namespace dgpu::store {

// Column `col` of the current row as text (empty for NULL); keeps any bytes, NULs included.
inline std::string ColumnText(sqlite3_stmt* stmt, int col) {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt, col));
  if (text == nullptr) return {};
  return std::string(text, static_cast<size_t>(sqlite3_column_bytes(stmt, col)));
}

}  // namespace dgpu::store
