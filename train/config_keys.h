// The run config's keys, one table of rows (core/fields.h): each row is a key's path, type,
// default, allowed values and meaning. parse_train_config reads every key through its row (so the
// default it fills in and the range it checks are the ones printed), TrainConfig::to_json writes
// every key through its row, and `minidl config --doc` prints the table as docs/config.md, with
// the keys of each section another part of minidl reads (data, optimizer, schedule, ...) from that
// part's own table.
#pragma once
#include <string>

#include "core/fields.h"
#include "train/config.h"

namespace minidl {

// Every key, in the order of docs/config.md.
const Fields<TrainConfig>& config_keys();

// docs/config.md: the table as a Markdown reference.
std::string config_reference_markdown();

}  // namespace minidl
