#include "compiler/ir/winograd.h"

namespace tunefarm::ir {

std::vector<float> WinogradWeight(const std::vector<float>& hwio, int64_t c, int64_t k) {
  static constexpr double kG[4][3] = {{1, 0, 0}, {0.5, 0.5, 0.5}, {0.5, -0.5, 0.5}, {0, 0, 1}};
  const int64_t plane = c * k;
  std::vector<float> u(size_t(16 * plane));
  for (int64_t ck = 0; ck < plane; ++ck) {
    double gg[4][3] = {};  // G g
    for (int e = 0; e < 4; ++e) {
      for (int j = 0; j < 3; ++j) {
        for (int i = 0; i < 3; ++i) gg[e][j] += kG[e][i] * hwio[size_t((i * 3 + j) * plane + ck)];
      }
    }
    for (int e = 0; e < 4; ++e) {
      for (int nu = 0; nu < 4; ++nu) {
        double x = 0;
        for (int j = 0; j < 3; ++j) x += gg[e][j] * kG[nu][j];
        u[size_t((e * 4 + nu) * plane + ck)] = float(x);
      }
    }
  }
  return u;
}

}  // namespace tunefarm::ir
