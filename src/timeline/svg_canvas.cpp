#include "timeline/svg_canvas.hpp"

#include <cstdio>

namespace elasticrun::timeline {
namespace {

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string rgb(Color c) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "#%02x%02x%02x", c.r, c.g, c.b);
  return buf;
}

}  // namespace

std::string xml_escape(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += ch;
    }
  }
  return out;
}

SvgCanvas::SvgCanvas(int width, int height) : width_(width), height_(height) {
  rect(0, 0, width, height, {255, 255, 255});
}

std::string SvgCanvas::svg() const {
  return "<svg width=\"" + std::to_string(width_) + "\" height=\"" + std::to_string(height_) +
         "\" viewBox=\"0 0 " + std::to_string(width_) + " " + std::to_string(height_) +
         "\" font-family=\"" + kFontFamily + ", monospace\">\n" + body_ + "</svg>\n";
}

void SvgCanvas::line(double x1, double y1, double x2, double y2, Color c, double width,
                     bool dashed) {
  body_ += "<line x1=\"" + num(x1) + "\" y1=\"" + num(y1) + "\" x2=\"" + num(x2) + "\" y2=\"" +
           num(y2) + "\" stroke=\"" + rgb(c) + "\" stroke-width=\"" + num(width) + "\"" +
           (dashed ? " stroke-dasharray=\"4 3\"" : "") + "/>\n";
}

void SvgCanvas::polyline(const std::vector<std::pair<double, double>>& points, Color c,
                         double width) {
  if (points.empty()) return;
  body_ += "<polyline fill=\"none\" stroke-linejoin=\"round\" stroke=\"" + rgb(c) +
           "\" stroke-width=\"" + num(width) + "\" points=\"";
  for (const auto& [x, y] : points) body_ += num(x) + "," + num(y) + " ";
  body_ += "\"/>\n";
}

void SvgCanvas::rect(double x, double y, double w, double h, Color fill) {
  body_ += "<rect x=\"" + num(x) + "\" y=\"" + num(y) + "\" width=\"" + num(w) + "\" height=\"" +
           num(h) + "\" fill=\"" + rgb(fill) + "\"/>\n";
}

void SvgCanvas::text(double x, double y, const std::string& s, double size, Color c, Anchor anchor,
                     bool bold) {
  const char* a = anchor == Anchor::kStart ? "start" : anchor == Anchor::kMiddle ? "middle" : "end";
  body_ += "<text x=\"" + num(x) + "\" y=\"" + num(y) + "\" font-size=\"" + num(size) +
           "\" fill=\"" + rgb(c) + "\" text-anchor=\"" + a + "\"" +
           (bold ? " font-weight=\"bold\"" : "") + " xml:space=\"preserve\">" + xml_escape(s) +
           "</text>\n";
}

void SvgCanvas::dot(double x, double y, double radius, Color c, const std::string& tooltip) {
  body_ += "<circle cx=\"" + num(x) + "\" cy=\"" + num(y) + "\" r=\"" + num(radius) + "\" fill=\"" +
           rgb(c) + "\"><title>" + xml_escape(tooltip) + "</title></circle>\n";
}

}  // namespace elasticrun::timeline
