// A Canvas onto a cairo image surface, written out as a PNG.
#pragma once

#include <memory>
#include <string>

#include "timeline/canvas.hpp"

namespace elasticrun::timeline {

class PngCanvas final : public Canvas {
 public:
  PngCanvas(int width, int height);  // white
  ~PngCanvas() override;
  PngCanvas(const PngCanvas&) = delete;
  PngCanvas& operator=(const PngCanvas&) = delete;

  // Throws Error naming the file when it cannot be written.
  void write(const std::string& path);

  void line(double x1, double y1, double x2, double y2, Color c, double width,
            bool dashed) override;
  void polyline(const std::vector<std::pair<double, double>>& points, Color c,
                double width) override;
  void rect(double x, double y, double w, double h, Color fill) override;
  void text(double x, double y, const std::string& s, double size, Color c, Anchor anchor,
            bool bold) override;
  void dot(double x, double y, double radius, Color c, const std::string& tooltip) override;

 private:
  struct Cairo;
  std::unique_ptr<Cairo> cairo_;
};

}  // namespace elasticrun::timeline
