// The metrics early stopping and the best checkpoint watch ("early_stopping.monitor",
// "checkpoint.monitor"), named as the epoch's metrics.jsonl record names them, and which way is
// better ("mode"; "auto": lower for a loss, higher for an accuracy, as Keras decides).
#pragma once
#include "core/enum_names.h"

namespace minidl {

enum class Metric { ValLoss, ValAcc, TrainLoss, TrainAcc };

template <>
struct EnumNames<Metric> {
  static constexpr EnumName<Metric> values[] = {{Metric::ValLoss, "val_loss"},
                                                {Metric::ValAcc, "val_acc"},
                                                {Metric::TrainLoss, "train_loss"},
                                                {Metric::TrainAcc, "train_acc"}};
};

enum class MonitorMode { Min, Max };

template <>
struct EnumNames<MonitorMode> {
  static constexpr EnumName<MonitorMode> values[] = {{MonitorMode::Min, "min"}, {MonitorMode::Max, "max"}};
};

// What "auto" means for `m`.
inline MonitorMode auto_mode(Metric m) {
  return m == Metric::ValLoss || m == Metric::TrainLoss ? MonitorMode::Min : MonitorMode::Max;
}

// Whether `m` is measured on the validation split.
inline bool on_validation(Metric m) { return m == Metric::ValLoss || m == Metric::ValAcc; }

}  // namespace minidl
