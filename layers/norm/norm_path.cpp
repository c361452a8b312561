#include "layers/norm/norm_path.h"

#include "layers/module_visit.h"

namespace minidl {

int64_t set_norm_single_read(Module& model, bool on) {
  return for_each_module_of<NormLayer>(model, [on](NormLayer& n) { n.set_single_read(on); });
}

}  // namespace minidl
