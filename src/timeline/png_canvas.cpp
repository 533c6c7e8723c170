#include "timeline/png_canvas.hpp"

#include <cairo.h>

#include "elasticrun/errors.hpp"

namespace elasticrun::timeline {

struct PngCanvas::Cairo {
  cairo_surface_t* surface = nullptr;
  cairo_t* cr = nullptr;
};

namespace {

void set_color(cairo_t* cr, Color c) {
  cairo_set_source_rgb(cr, c.r / 255.0, c.g / 255.0, c.b / 255.0);
}

}  // namespace

PngCanvas::PngCanvas(int width, int height) : cairo_(std::make_unique<Cairo>()) {
  cairo_->surface = cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height);
  cairo_->cr = cairo_create(cairo_->surface);
  if (cairo_status(cairo_->cr) != CAIRO_STATUS_SUCCESS) {
    throw Error(std::string("cairo: ") + cairo_status_to_string(cairo_status(cairo_->cr)));
  }
  cairo_set_source_rgb(cairo_->cr, 1, 1, 1);
  cairo_paint(cairo_->cr);
}

PngCanvas::~PngCanvas() {
  cairo_destroy(cairo_->cr);
  cairo_surface_destroy(cairo_->surface);
}

void PngCanvas::write(const std::string& path) {
  cairo_surface_flush(cairo_->surface);
  const cairo_status_t status = cairo_surface_write_to_png(cairo_->surface, path.c_str());
  if (status != CAIRO_STATUS_SUCCESS) {
    throw Error("cannot write " + path + ": " + cairo_status_to_string(status));
  }
}

void PngCanvas::line(double x1, double y1, double x2, double y2, Color c, double width,
                     bool dashed) {
  cairo_t* cr = cairo_->cr;
  set_color(cr, c);
  cairo_set_line_width(cr, width);
  const double dash[] = {4.0, 3.0};
  cairo_set_dash(cr, dash, dashed ? 2 : 0, 0);
  cairo_move_to(cr, x1, y1);
  cairo_line_to(cr, x2, y2);
  cairo_stroke(cr);
  cairo_set_dash(cr, nullptr, 0, 0);
}

void PngCanvas::polyline(const std::vector<std::pair<double, double>>& points, Color c,
                         double width) {
  if (points.empty()) return;
  cairo_t* cr = cairo_->cr;
  set_color(cr, c);
  cairo_set_line_width(cr, width);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
  cairo_move_to(cr, points[0].first, points[0].second);
  for (size_t i = 1; i < points.size(); ++i) cairo_line_to(cr, points[i].first, points[i].second);
  cairo_stroke(cr);
}

void PngCanvas::rect(double x, double y, double w, double h, Color fill) {
  set_color(cairo_->cr, fill);
  cairo_rectangle(cairo_->cr, x, y, w, h);
  cairo_fill(cairo_->cr);
}

void PngCanvas::text(double x, double y, const std::string& s, double size, Color c, Anchor anchor,
                     bool bold) {
  cairo_t* cr = cairo_->cr;
  set_color(cr, c);
  cairo_select_font_face(cr, kFontFamily, CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, size);
  const double w = text_width(s, size);
  const double left = anchor == Anchor::kStart ? x : anchor == Anchor::kMiddle ? x - w / 2 : x - w;
  cairo_move_to(cr, left, y);
  cairo_show_text(cr, s.c_str());
}

void PngCanvas::dot(double x, double y, double radius, Color c, const std::string& /*tooltip*/) {
  cairo_t* cr = cairo_->cr;
  set_color(cr, c);
  cairo_arc(cr, x, y, radius, 0, 6.283185307179586);
  cairo_fill(cr);
}

}  // namespace elasticrun::timeline
