// A model's parameters as the optimizer factory takes them: each with its dotted name and the
// type of the module that owns it (for parameter groups matching "module_type").
#pragma once
#include <vector>

#include "layers/module.h"
#include "optim/optimizer.h"

namespace minidl {

std::vector<NamedParam> named_parameters(Module& model);

}  // namespace minidl
