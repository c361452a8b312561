// `minidl parity`: the minidl half of the PyTorch parity check (scripts/parity/parity.py holds
// the PyTorch half and the comparison; docs/parity.md explains both). Tensors travel both ways
// as safetensors files, under PyTorch's names.
//
// Layer mode:
//   minidl parity --spec LAYER_JSON --in IN.safetensors --out OUT.safetensors
//                 [--device cpu|cuda] [--train|--eval] [--no-tf32]
// builds one layer from LAYER_JSON (a file, or the JSON text itself when it starts with '{'),
// loads its parameters and buffers from IN by name ("weight", "running_mean", ...), runs forward
// on IN's "input" and backward from IN's "grad_output", and writes "output", "grad_input",
// "grad.<param>" and "buffer.<name>" (the buffers after the call: BN running statistics).
//
// Model mode:
//   minidl parity --config CONFIG.json --in IN.safetensors --out OUT.safetensors
//                 [--device cpu|cuda] [--no-tf32]
// builds config.model.layers, loads every parameter and buffer from IN, and does ONE training
// step on IN's "input" (N,3,H,W float32) and "labels" (N int32): forward, cross-entropy with the
// config's label smoothing, backward, and one step of the config's optimizer at its base lr (the
// schedule is ignored: most schedules start at factor 0, which would make the step a no-op).
// Writes "loss", "output" (the logits), "grad.<param>" (before the step), "param.<param>" and
// "buffer.<name>" (after the step).
#pragma once
#include <string>
#include <vector>

namespace minidl {

// `args` are the words after `minidl parity`. Returns the exit code; errors throw minidl::Error.
int parity_main(const std::vector<std::string>& args);

}  // namespace minidl
