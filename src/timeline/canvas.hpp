// What the timeline chart draws on: a few primitives in pixels (origin top
// left), made as a PNG by cairo (png_canvas.hpp) and as inline SVG for the
// HTML page (svg_canvas.hpp). Text is monospaced in both, so that the
// chart's layout can measure it without a font (text_width).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace elasticrun::timeline {

struct Color {
  uint8_t r = 0, g = 0, b = 0;
};

enum class Anchor { kStart, kMiddle, kEnd };

// The font both canvases use, and the width of its glyphs in ems.
inline constexpr const char* kFontFamily = "DejaVu Sans Mono";
inline constexpr double kGlyphEm = 0.602;

// The width of `s` (UTF-8) at font size `size`.
double text_width(const std::string& s, double size);

class Canvas {
 public:
  virtual ~Canvas() = default;
  virtual void line(double x1, double y1, double x2, double y2, Color c, double width,
                    bool dashed = false) = 0;
  virtual void polyline(const std::vector<std::pair<double, double>>& points, Color c,
                        double width) = 0;
  virtual void rect(double x, double y, double w, double h, Color fill) = 0;
  // `y` is the text's baseline.
  virtual void text(double x, double y, const std::string& s, double size, Color c,
                    Anchor anchor = Anchor::kStart, bool bold = false) = 0;
  // A dot; `tooltip` shows on hover where the format can (SVG).
  virtual void dot(double x, double y, double radius, Color c, const std::string& tooltip) = 0;
};

}  // namespace elasticrun::timeline
