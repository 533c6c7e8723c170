#include "timeline/canvas.hpp"

namespace elasticrun::timeline {

double text_width(const std::string& s, double size) {
  size_t glyphs = 0;
  for (unsigned char ch : s) {
    if ((ch & 0xC0) != 0x80) ++glyphs;  // not a UTF-8 continuation byte
  }
  return static_cast<double>(glyphs) * kGlyphEm * size;
}

}  // namespace elasticrun::timeline
