#include "train/tensorboard.h"

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "tensorboard_event.pb.h"

namespace minidl {

namespace tb = minidl::tensorboard;

namespace {

std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
    t[i] = c;
  }
  return t;
}

double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
uint64_t get_le(const unsigned char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  static const std::array<uint32_t, 256> table = make_crc32c_table();
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = 0xFFFFFFFFu;
  for (size_t i = 0; i < size; ++i) c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
  return c ^ 0xFFFFFFFFu;
}

uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t c = crc32c(data, size);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, int64_t start_step) {
  const double now = unix_seconds();
  path_ = str(dir, "/events.out.tfevents.", static_cast<int64_t>(now), ".", host_name());
  if (std::filesystem::exists(path_)) path_ += str(".", getpid());
  out_.open(path_, std::ios::binary | std::ios::trunc);
  MINIDL_CHECK(out_.good(), "cannot create the TensorBoard event file '", path_, "'");
  tb::Event version;
  version.set_wall_time(now);
  version.set_file_version("brain.Event:2");
  write_record(version.SerializeAsString());
  tb::Event start;
  start.set_wall_time(now);
  start.set_step(start_step);
  start.mutable_session_log()->set_status(tb::SessionLog::START);
  write_record(start.SerializeAsString());
  flush();
}

void TensorBoardWriter::scalar(const std::string& tag, int64_t step, float value, double wall_time) {
  tb::Event e;
  e.set_wall_time(wall_time < 0 ? unix_seconds() : wall_time);
  e.set_step(step);
  tb::SummaryValue* v = e.mutable_summary()->add_value();
  v->set_tag(tag);
  v->set_simple_value(value);
  write_record(e.SerializeAsString());
}

void TensorBoardWriter::flush() {
  out_.flush();
  MINIDL_CHECK(out_.good(), "cannot write the TensorBoard event file '", path_, "'");
}

void TensorBoardWriter::write_record(const std::string& bytes) {
  std::string header;
  put_u64(header, bytes.size());
  std::string frame = header;
  put_u32(frame, masked_crc32c(header.data(), header.size()));
  frame += bytes;
  put_u32(frame, masked_crc32c(bytes.data(), bytes.size()));
  out_.write(frame.data(), static_cast<std::streamsize>(frame.size()));
}

std::vector<std::pair<std::string, double>> tensorboard_epoch_scalars(const nlohmann::json& record, int64_t steps) {
  static const std::pair<const char*, const char*> kTags[] = {{"train_acc", "accuracy/train"},
                                                              {"test_acc", "accuracy/test"},
                                                              {"test_acc_tta", "accuracy/test_tta"},
                                                              {"test_dice", "dice/test"},
                                                              {"train_loss", "epoch/train_loss"},
                                                              {"val_acc", "accuracy/val"},
                                                              {"val_acc_tta", "accuracy/val_tta"},
                                                              {"val_loss", "epoch/val_loss"},
                                                              {"test_loss", "epoch/test_loss"},
                                                              {"tokens_per_s", "throughput/tokens_per_s"},
                                                              {"lr", "lr"},
                                                              {"images_per_s", "throughput/images_per_s"},
                                                              {"seconds", "time/epoch_s"},
                                                              {"eval_seconds", "time/eval_s"},
                                                              {"epoch", "epoch"}};
  std::vector<std::pair<std::string, double>> out;
  for (const auto& [key, tag] : kTags)
    if (record.contains(key) && record[key].is_number()) out.emplace_back(tag, record[key].get<double>());
  if (steps > 0 && record.contains("seconds") && record["seconds"].is_number())
    out.emplace_back("time/step_ms", 1000.0 * record["seconds"].get<double>() / static_cast<double>(steps));
  return out;
}

TensorBoardEvents read_tensorboard_events(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MINIDL_CHECK(in.good(), "cannot open the TensorBoard event file '", path, "'");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  TensorBoardEvents events;
  size_t at = 0;
  for (int64_t record = 0; at < bytes.size(); ++record) {
    MINIDL_CHECK(bytes.size() - at >= 12, path, ": record ", record, " is cut short in its header");
    const uint64_t length = get_le(p + at, 8);
    MINIDL_CHECK(static_cast<uint32_t>(get_le(p + at + 8, 4)) == masked_crc32c(p + at, 8), path, ": record ",
                 record, ": the length's CRC does not match");
    const size_t left = bytes.size() - at - 12;
    MINIDL_CHECK(left >= 4 && length <= left - 4, path, ": record ", record, " is cut short (", length,
                 " bytes announced)");
    const unsigned char* data = p + at + 12;
    MINIDL_CHECK(static_cast<uint32_t>(get_le(data + length, 4)) == masked_crc32c(data, length), path, ": record ",
                 record, ": the data's CRC does not match");
    tb::Event e;
    MINIDL_CHECK(e.ParseFromArray(data, static_cast<int>(length)), path, ": record ", record,
                 " is not an Event");
    if (e.what_case() == tb::Event::kFileVersion) events.file_version = e.file_version();
    if (e.what_case() == tb::Event::kSessionLog && e.session_log().status() == tb::SessionLog::START)
      events.session_starts.push_back(e.step());
    if (e.what_case() == tb::Event::kSummary)
      for (const tb::SummaryValue& v : e.summary().value())
        events.scalars.push_back({v.tag(), e.step(), v.simple_value(), e.wall_time()});
    at += 12 + length + 4;
  }
  return events;
}

}  // namespace minidl
