// `minidl bench train`: training and evaluation images/s of a config on a device (training steps
// timed after warm-up with a synchronize at both ends; evaluation = one pass over the test set).
#pragma once
#include <string>
#include <vector>

namespace minidl {

int bench_train_main(const std::vector<std::string>& args);

}  // namespace minidl
