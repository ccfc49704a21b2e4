// See rope_reference.hpp.
#include "rope_reference.hpp"

#include <cmath>
#include <vector>

namespace clattn::ref {

void rope_row(double* x, int D, int R, bool gptj, int64_t pos, double theta, double scale, const double* cos_sin) {
  const int half = R / 2;
  std::vector<double> in(x, x + D);
  for (int i = 0; i < half; ++i) {
    double c, s;
    if (cos_sin) {
      c = cos_sin[i];
      s = cos_sin[half + i];
    } else {
      const double angle = double(pos) / scale * std::pow(theta, -2.0 * i / R);
      c = std::cos(angle);
      s = std::sin(angle);
    }
    const int a = gptj ? 2 * i : i, b = gptj ? 2 * i + 1 : i + half;
    x[a] = in[a] * c - in[b] * s;
    x[b] = in[b] * c + in[a] * s;
  }
}

}  // namespace clattn::ref
