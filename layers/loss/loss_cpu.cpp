// CPU kernels of the cross-entropy loss (the (N, K) form and the language model's (B, T, V) one)
// and of argmax/accuracy. Each row is computed by one thread in float64 (this is also the
// reference the CUDA path is tested against), and the row losses are summed afterwards in row
// order, so the result does not depend on threads.
#include <cmath>
#include <vector>

#include "layers/loss/loss_kernels.h"

namespace minidl::kernels {

namespace {
constexpr int64_t kParallelMin = 1 << 14;  // logits below which one thread is faster

// Row i's log-sum-exp and its loss against `label`: -log softmax_k = lse - x_k, so the loss is
// (1 - eps)(lse - x_label) + eps (lse - mean_k x_k).
struct RowLoss {
  double lse, loss;
};
RowLoss row_loss(const float* x, int64_t classes, int32_t label, double eps) {
  double m = -INFINITY;
  for (int64_t k = 0; k < classes; ++k) m = std::fmax(m, static_cast<double>(x[k]));
  double sum_exp = 0, sum_x = 0;
  for (int64_t k = 0; k < classes; ++k) {
    sum_exp += std::exp(x[k] - m);
    sum_x += x[k];
  }
  const double lse = m + std::log(sum_exp);
  return {lse, (1 - eps) * (lse - x[label]) + eps * (lse - sum_x / static_cast<double>(classes))};
}

// The mean of the row losses, summed in row order.
float mean_in_order(const std::vector<double>& row_losses) {
  double total = 0;
  for (double l : row_losses) total += l;
  return static_cast<float>(total / static_cast<double>(row_losses.size()));
}

}  // namespace

void cross_entropy_forward_cpu(const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                               float label_smoothing, float* loss, float* dlogits) {
  const double eps = label_smoothing;
  std::vector<double> losses(static_cast<size_t>(rows));
#pragma omp parallel for schedule(static) if (rows * classes > kParallelMin)
  for (int64_t i = 0; i < rows; ++i) {
    const float* x = logits + i * classes;
    const int32_t label = labels[i];
    const RowLoss r = row_loss(x, classes, label, eps);
    losses[static_cast<size_t>(i)] = r.loss;
    if (dlogits) {
      float* d = dlogits + i * classes;
      for (int64_t k = 0; k < classes; ++k) {
        const double q = eps / static_cast<double>(classes) + (k == label ? 1 - eps : 0.0);
        d[k] = static_cast<float>((std::exp(x[k] - r.lse) - q) / static_cast<double>(rows));
      }
    }
  }
  *loss = mean_in_order(losses);
}

void token_cross_entropy_forward_cpu(const float* logits, const int32_t* labels, int64_t rows, int64_t classes,
                                     float label_smoothing, float* row_lse, float* loss) {
  std::vector<double> losses(static_cast<size_t>(rows));
#pragma omp parallel for schedule(static) if (rows * classes > kParallelMin)
  for (int64_t i = 0; i < rows; ++i) {
    const RowLoss r = row_loss(logits + i * classes, classes, labels[i], label_smoothing);
    row_lse[i] = static_cast<float>(r.lse);
    losses[static_cast<size_t>(i)] = r.loss;
  }
  *loss = mean_in_order(losses);
}

void token_cross_entropy_backward_cpu(const float* logits, const int32_t* labels, const float* row_lse, int64_t rows,
                                      int64_t classes, float label_smoothing, float g, float* dlogits) {
  const double eps = label_smoothing, scale = static_cast<double>(g) / static_cast<double>(rows);
#pragma omp parallel for schedule(static) if (rows * classes > kParallelMin)
  for (int64_t i = 0; i < rows; ++i) {
    const float* x = logits + i * classes;
    float* d = dlogits + i * classes;
    for (int64_t k = 0; k < classes; ++k) {
      const double q = eps / static_cast<double>(classes) + (k == labels[i] ? 1 - eps : 0.0);
      d[k] = static_cast<float>((std::exp(static_cast<double>(x[k]) - row_lse[i]) - q) * scale);
    }
  }
}

// The first maximum, a NaN counting as the maximum (the first NaN), as torch.argmax.
void argmax_rows_cpu(const float* logits, int64_t rows, int64_t classes, int32_t* out) {
#pragma omp parallel for schedule(static) if (rows * classes > kParallelMin)
  for (int64_t i = 0; i < rows; ++i) {
    const float* x = logits + i * classes;
    float best = x[0];
    int64_t best_k = 0;
    for (int64_t k = 1; k < classes && !std::isnan(best); ++k)
      if (x[k] > best || std::isnan(x[k])) {
        best = x[k];
        best_k = k;
      }
    out[i] = static_cast<int32_t>(best_k);
  }
}

int64_t count_correct_cpu(const float* logits, const int32_t* labels, int64_t rows, int64_t classes) {
  std::vector<int32_t> argmax(static_cast<size_t>(rows));
  argmax_rows_cpu(logits, rows, classes, argmax.data());
  int64_t correct = 0;
  for (int64_t i = 0; i < rows; ++i) correct += argmax[static_cast<size_t>(i)] == labels[i];
  return correct;
}

}  // namespace minidl::kernels
