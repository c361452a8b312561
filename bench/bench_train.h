// `minidl bench train`: training and evaluation images/s of a config on a device (training steps
// timed after warm-up with a synchronize at both ends; evaluation = one pass over the test set).
// Under mpirun every rank trains its share of each step (docs/distributed.md) and rank 0 also
// prints the images/s per rank and in total.
#pragma once
#include <string>
#include <vector>

namespace minidl {

int bench_train_main(const std::vector<std::string>& args);

}  // namespace minidl
