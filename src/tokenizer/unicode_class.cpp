// unicode_class.cpp — see unicode_class.h. The generated tables are constant data.
#include "tokenizer/unicode_class.h"

#include <cstddef>

namespace ds4::tokenizer {
namespace unicode_detail {
#include "tokenizer/unicode_tables.inc"
}  // namespace unicode_detail

const char* unicode_table_version() { return unicode_detail::kUnicodeVersion; }

}  // namespace ds4::tokenizer
