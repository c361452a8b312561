#include "layers/conv/patch_whitening.h"

#include <Eigen/Dense>
#include <cmath>

#include "core/allocator.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "layers/conv/patch_whitening_kernels.h"

namespace minidl {

std::vector<double> patch_moments(const Tensor& images, int64_t kh, int64_t kw) {
  check_rank(images, 4, "patch_moments: images");
  MINIDL_CHECK(images.is_contiguous(), "patch_moments: images must be contiguous");
  const int64_t n = images.size(0), c = images.size(1), h = images.size(2), w = images.size(3);
  MINIDL_CHECK(n >= 1 && kh >= 1 && kw >= 1 && kh <= h && kw <= w, "patch_moments: ", kh, "x", kw,
               " patches of ", images.str());
  const int64_t d = c * kh * kw;
  std::vector<double> out(static_cast<size_t>(d * d));
  dispatch(
      images.device(), "patch_moments",
      [&] { kernels::patch_moments_cpu(images.data<float>(), n, c, h, w, kh, kw, out.data()); },
      [&] {
        // The d x d result is tiny: a device buffer, then one copy to the host.
        std::shared_ptr<void> dev = allocate(out.size() * sizeof(double), images.device());
        kernels::patch_moments_cuda(images.data<float>(), n, c, h, w, kh, kw, static_cast<double*>(dev.get()));
        copy_bytes(out.data(), Device::cpu(), dev.get(), images.device(), out.size() * sizeof(double));
      });
  return out;
}

Tensor whitening_filters(const std::vector<double>& moments, int64_t c, int64_t kh, int64_t kw, double eps) {
  const int64_t d = c * kh * kw;
  MINIDL_CHECK(static_cast<int64_t>(moments.size()) == d * d, "whitening_filters: expected a ", d, "x", d,
               " matrix, got ", moments.size(), " values");
  MINIDL_CHECK(eps >= 0, "whitening_filters: eps must be >= 0, got ", eps);
  const Eigen::Map<const Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>> m(moments.data(), d, d);
  const Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(m);
  MINIDL_CHECK(solver.info() == Eigen::Success, "whitening_filters: the eigen decomposition did not converge");
  std::vector<float> w(static_cast<size_t>(2 * d * d));
  for (int64_t k = 0; k < d; ++k) {
    const int64_t col = d - 1 - k;  // Eigen sorts eigenvalues ascending; filters go largest first
    const double lambda = solver.eigenvalues()(col);
    MINIDL_CHECK(lambda + eps > 0, "whitening_filters: eigenvalue ", lambda, " + eps ", eps,
                 " is not positive (constant images? raise eps)");
    Eigen::VectorXd v = solver.eigenvectors().col(col);
    Eigen::Index big = 0;
    v.cwiseAbs().maxCoeff(&big);
    if (v(big) < 0) v = -v;
    const double s = 1.0 / std::sqrt(lambda + eps);
    for (int64_t e = 0; e < d; ++e) {
      w[static_cast<size_t>(k * d + e)] = static_cast<float>(v(e) * s);
      w[static_cast<size_t>((k + d) * d + e)] = static_cast<float>(-v(e) * s);
    }
  }
  return Tensor::from_vector(w, {2 * d, c, kh, kw});
}

}  // namespace minidl
