// A Canvas that writes an SVG document (the HTML timeline inlines it): dots
// carry their tooltip as a <title>, which a browser shows on hover.
#pragma once

#include <string>

#include "timeline/canvas.hpp"

namespace elasticrun::timeline {

class SvgCanvas final : public Canvas {
 public:
  SvgCanvas(int width, int height);

  // The <svg> element, drawn so far.
  std::string svg() const;

  void line(double x1, double y1, double x2, double y2, Color c, double width,
            bool dashed) override;
  void polyline(const std::vector<std::pair<double, double>>& points, Color c,
                double width) override;
  void rect(double x, double y, double w, double h, Color fill) override;
  void text(double x, double y, const std::string& s, double size, Color c, Anchor anchor,
            bool bold) override;
  void dot(double x, double y, double radius, Color c, const std::string& tooltip) override;

 private:
  int width_, height_;
  std::string body_;
};

// `s` with &, <, >, " escaped, for XML and HTML text and attributes.
std::string xml_escape(const std::string& s);

}  // namespace elasticrun::timeline
