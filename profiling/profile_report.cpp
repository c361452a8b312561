#include "profiling/profile_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include "core/error.h"

namespace minidl {

namespace {

const char* kind_name(RowKind k) {
  switch (k) {
    case RowKind::Module: return "module";
    case RowKind::Section: return "section";
    case RowKind::Autograd: return "autograd";
    case RowKind::Other: return "other";
  }
  return "other";
}

// The row's share of the step: GPU time on CUDA (what bounds a GPU step once the host runs
// ahead), host time on the CPU (where the host does the work).
double row_time(const ProfileReport& r, const ProfileRow& row) {
  return r.gpu_timed ? row.gpu_ms() : row.host_ms();
}

double share(const ProfileReport& r, const ProfileRow& row) {
  double total = row_time(r, r.total);
  return total > 0 ? row_time(r, row) / total : 0.0;
}

std::string fixed(double v, int decimals = 3) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

std::string megabytes(double bytes) { return fixed(bytes / 1e6, 1); }

std::string pad_left(const std::string& s, size_t width) {
  return s.size() >= width ? s : std::string(width - s.size(), ' ') + s;
}

std::string pad_right(const std::string& s, size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

// "-" where a row has nothing in that direction (a container's backward, a section's), so an
// empty cell is not mistaken for a measured 0.000.
std::string cell(double ms, bool empty) { return pad_left(empty ? "-" : fixed(ms), 11); }

std::string table_line(const ProfileReport& r, const ProfileRow& row, size_t name_width,
                       const std::string& label) {
  bool no_fwd = row.fwd_calls == 0 && row.fwd_host_ms == 0 && row.fwd_gpu_ms == 0;
  bool no_bwd = row.bwd_calls == 0 && row.bwd_host_ms == 0 && row.bwd_gpu_ms == 0;
  std::string line = pad_right(label, name_width);
  if (r.gpu_timed) line += cell(row.fwd_gpu_ms, no_fwd);
  line += cell(row.fwd_host_ms, no_fwd);
  if (r.gpu_timed) line += cell(row.bwd_gpu_ms, no_bwd);
  line += cell(row.bwd_host_ms, no_bwd);
  line += pad_left(fixed(100.0 * share(r, row), 1) + "%", 10);
  return line + "\n";
}

std::string ratio_cell(double v, int width) {
  if (v <= 0) return pad_left("-", width);
  return pad_left(fixed(v, v >= 100 ? 0 : v >= 10 ? 1 : v >= 1 ? 2 : 3), width);
}

// The longest row name the roofline table prints whole: its lines stay within 120 columns.
constexpr size_t kRooflineNameWidth = 48;

std::string roofline_line(const ProfileReport& r, const ProfileRow& row, bool backward, size_t name_width,
                          const std::string& label) {
  const PassRoofline p = pass_roofline(r, row, backward);
  const std::string name = label.size() > name_width - 2 ? label.substr(0, name_width - 3) + "~" : label;
  std::string line = pad_right(name, name_width) + pad_left(backward ? "bwd" : "fwd", 4);
  if (!row.work_known) {
    for (int i = 0; i < 6; ++i) line += pad_left("-", 8);
    line += pad_left("-", 9);
  } else {
    line += pad_left(fixed(p.flops / 1e9, 3), 8) + pad_left(fixed(p.bytes / 1e6, 2), 8);
    line += ratio_cell(p.ms > 0 ? p.tflops : 0, 8) + ratio_cell(p.ms > 0 ? p.gbs : 0, 8);
    line += pad_left(p.fraction_of_limit >= 0 ? fixed(100.0 * p.fraction_of_limit, 1) + "%" : "-", 8);
    line += pad_left(p.bound.empty() ? "-" : p.bound, 8);
    line += pad_left(backward ? "" : megabytes(row.saved_bytes), 9);
  }
  line += pad_left(megabytes(backward ? row.bwd_temp_bytes : row.fwd_temp_bytes), 8);
  return line + "\n";
}

nlohmann::json pass_json(const ProfileReport& r, const ProfileRow& row, bool backward) {
  const PassRoofline p = pass_roofline(r, row, backward);
  nlohmann::json j = {{"flops", p.flops}, {"bytes", p.bytes}, {"ms", p.ms}};
  if (p.ms > 0) {
    j["tflops"] = p.tflops;
    j["gbs"] = p.gbs;
  }
  if (p.fraction_of_limit >= 0) {
    j["fraction_of_limit"] = p.fraction_of_limit;
    j["bound"] = p.bound;
  }
  return j;
}

nlohmann::json row_json(const ProfileReport& r, const ProfileRow& row) {
  nlohmann::json j;
  j["name"] = row.name;
  j["kind"] = kind_name(row.kind);
  j["type"] = row.type;
  if (row.kind == RowKind::Module) {
    j["path"] = row.path;
    j["depth"] = row.depth;
    j["module_id"] = row.module_id;
  }
  j["fwd_calls"] = row.fwd_calls;
  j["bwd_calls"] = row.bwd_calls;
  j["fwd_host_ms"] = row.fwd_host_ms;
  j["bwd_host_ms"] = row.bwd_host_ms;
  if (r.gpu_timed) {
    j["fwd_gpu_ms"] = row.fwd_gpu_ms;
    j["bwd_gpu_ms"] = row.bwd_gpu_ms;
  }
  j["share"] = share(r, row);
  if (row.work_known) {
    j["work"] = {{"fwd", pass_json(r, row, false)}, {"bwd", pass_json(r, row, true)}};
    j["saved_bytes"] = row.saved_bytes;
  } else {
    j["work"] = nullptr;
  }
  j["memory"] = {{"fwd_kept_bytes", row.fwd_kept_bytes},
                 {"fwd_temp_bytes", row.fwd_temp_bytes},
                 {"bwd_temp_bytes", row.bwd_temp_bytes}};
  return j;
}

// Microseconds rounded to whole nanoseconds, the clocks' resolution: shorter files, no noise digits.
double to_ns(double us) { return std::round(us * 1000.0) / 1000.0; }

void write_text(const std::string& path, const std::string& text, const char* what) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  MINIDL_CHECK(out.good(), "cannot open '", path, "' to write the ", what);
  out << text;
  out.close();
  MINIDL_CHECK(out.good(), "failed writing the ", what, " to '", path, "'");
}

}  // namespace

std::string format_profile_table(const ProfileReport& r, std::optional<double> unprofiled_step_ms,
                                 std::optional<double> graphed_step_ms) {
  size_t name_width = 6;
  for (const ProfileRow& row : r.rows)
    name_width = std::max(name_width, 2 * static_cast<size_t>(row.depth) + row.name.size());
  name_width += 2;

  std::string s = str("Per-layer profile on ", r.device.str(), ": median of ", r.measured_steps,
                      " measured step", r.measured_steps == 1 ? "" : "s",
                      "; ms per step of each row's own time (children excluded)\n");
  std::string header = pad_right("module", name_width);
  if (r.gpu_timed) header += pad_left("fwd GPU", 11);
  header += pad_left("fwd host", 11);
  if (r.gpu_timed) header += pad_left("bwd GPU", 11);
  header += pad_left("bwd host", 11);
  header += pad_left(r.gpu_timed ? "GPU share" : "share", 10);
  s += header + "\n";
  const std::string rule(header.size(), '-');
  s += rule + "\n";
  for (const ProfileRow& row : r.rows)
    s += table_line(r, row, name_width, std::string(2 * static_cast<size_t>(row.depth), ' ') + row.name);
  s += rule + "\n";
  s += table_line(r, r.total, name_width, "total");

  if (r.gpu_timed)
    s += str("step: GPU ", fixed(r.step_gpu_ms), " ms (CUDA events, first to last boundary); ");
  else
    s += "step: ";
  s += str("wall ", fixed(r.step_wall_ms), " ms profiled,\n  of which ", fixed(r.overhead_host_ms),
           " ms inside the profiler's hooks (in no row)\n");
  if (unprofiled_step_ms) {
    double u = *unprofiled_step_ms;
    s += str("unprofiled step: wall ", fixed(u), " ms");
    // Over few steps the unprofiled median can come out slower: within the noise, not a gain.
    if (u > 0)
      s += r.step_wall_ms >= u ? str(" (profiling adds ", fixed(100.0 * (r.step_wall_ms - u) / u, 1), "%)")
                               : std::string(" (profiling adds nothing measurable)");
    s += "\n";
  } else {
    s += "unprofiled step: not measured\n";
  }
  if (graphed_step_ms) {
    s += str("graphed step: wall ", fixed(*graphed_step_ms), " ms (one CUDA graph replay");
    if (unprofiled_step_ms && *graphed_step_ms > 0)
      s += str(", ", fixed(*unprofiled_step_ms / *graphed_step_ms, 2), "x the unprofiled eager step");
    s += ")\n";
  }
  return s + "\n" + format_roofline_table(r);
}

PassRoofline pass_roofline(const ProfileReport& r, const ProfileRow& row, bool backward) {
  PassRoofline p;
  const PassWork& w = backward ? row.bwd_work : row.fwd_work;
  const bool ran = backward ? row.bwd_calls > 0 : row.fwd_calls > 0;
  p.known = row.work_known && ran;
  p.flops = w.flops;
  p.bytes = w.bytes;
  p.ms = r.gpu_timed ? (backward ? row.bwd_gpu_ms : row.fwd_gpu_ms) : (backward ? row.bwd_host_ms : row.fwd_host_ms);
  if (!p.known || p.ms <= 0) return p;
  p.tflops = p.flops / (p.ms * 1e-3) / 1e12;
  p.gbs = p.bytes / (p.ms * 1e-3) / 1e9;
  if (r.limits && r.limits->peak_tflops > 0 && r.limits->copy_gbs > 0 && (p.flops > 0 || p.bytes > 0)) {
    const double compute = p.tflops / r.limits->peak_tflops, memory = p.gbs / r.limits->copy_gbs;
    p.fraction_of_limit = std::max(compute, memory);
    p.bound = p.fraction_of_limit < kLatencyBoundFraction ? "latency"
              : compute >= memory                          ? "compute"
              : memory > 1                                 ? "cache"
                                                           : "memory";
  }
  return p;
}

std::string format_roofline_table(const ProfileReport& r) {
  std::vector<const ProfileRow*> rows;
  for (const ProfileRow& row : r.rows) {
    if (row.kind != RowKind::Module && row.kind != RowKind::Section) continue;
    const bool zero = row.work_known && row.fwd_work.flops == 0 && row.fwd_work.bytes == 0 &&
                      row.bwd_work.flops == 0 && row.bwd_work.bytes == 0;
    if (!zero && (row.fwd_calls > 0 || row.bwd_calls > 0)) rows.push_back(&row);
  }
  size_t name_width = 6;
  for (const ProfileRow* row : rows) name_width = std::max(name_width, row->name.size());
  name_width = std::min(name_width, kRooflineNameWidth) + 2;

  std::string s;
  if (r.limits) {
    const DeviceLimits& l = *r.limits;
    s += str("Roofline on ", l.device_name, ": ", fixed(l.peak_tflops, l.peak_tflops >= 10 ? 1 : 3), " TFLOP/s ",
             l.dtype, " GEMM, ", fixed(l.copy_gbs, 0), " GB/s copy, ridge ", fixed(l.ridge_flops_per_byte(), 1),
             " FLOP/byte\n  (limits ", l.source, l.cache_path.empty() ? "" : " in " + l.cache_path, ")\n");
  } else {
    s += "Roofline: the device's limits were not measured (no % of limit or bound)\n";
  }
  s += str("per pass: its work per step over its ", r.gpu_timed ? "GPU" : "host",
           " time; % of the roof at its intensity; latency: under ", fixed(100 * kLatencyBoundFraction, 0),
           "% of both roofs\n");
  s += "saved MB: kept for backward; temp MB: the most the pass held above its start at once (workspaces)\n";
  std::string header = pad_right("row", name_width) + pad_left("pass", 4) + pad_left("GFLOP", 8) +
                       pad_left("MB", 8) + pad_left("TFLOP/s", 8) + pad_left("GB/s", 8) + pad_left("% limit", 8) +
                       pad_left("bound", 8) + pad_left("saved MB", 9) + pad_left("temp MB", 8);
  s += header + "\n" + std::string(header.size(), '-') + "\n";
  for (const ProfileRow* row : rows) {
    if (row->fwd_calls > 0) s += roofline_line(r, *row, false, name_width, row->name);
    if (row->bwd_calls > 0) s += roofline_line(r, *row, true, name_width, row->fwd_calls > 0 ? "" : row->name);
  }
  s += std::string(header.size(), '-') + "\n";
  s += roofline_line(r, r.total, false, name_width, "total");
  s += roofline_line(r, r.total, true, name_width, "");
  if (!r.work_complete) s += "(the total leaves out rows shown \"-\": they do not report their work)\n";
  if (r.step_peak_bytes > 0)
    s += str("memory: ", megabytes(r.step_start_bytes), " MB allocated at the step's start, peak ",
             megabytes(r.step_peak_bytes), " MB in '", r.peak_row, r.peak_backward ? " backward" : "", "'\n");
  return s;
}

nlohmann::json profile_json(const ProfileReport& r, std::optional<double> unprofiled_step_ms,
                            std::optional<double> graphed_step_ms) {
  nlohmann::json j;
  j["device"] = r.device.str();
  j["measured_steps"] = r.measured_steps;
  j["statistic"] = "median over measured steps, ms per step, exclusive time per row";
  j["rows"] = nlohmann::json::array();
  for (const ProfileRow& row : r.rows) j["rows"].push_back(row_json(r, row));
  j["total"] = row_json(r, r.total);
  nlohmann::json step;
  if (r.gpu_timed) step["gpu_ms"] = r.step_gpu_ms;
  step["wall_ms"] = r.step_wall_ms;
  step["profiler_hooks_host_ms"] = r.overhead_host_ms;
  step["unprofiled_wall_ms"] = unprofiled_step_ms ? nlohmann::json(*unprofiled_step_ms) : nlohmann::json();
  step["graphed_wall_ms"] = graphed_step_ms ? nlohmann::json(*graphed_step_ms) : nlohmann::json();
  j["step"] = step;
  j["compute_dtype"] = dtype_name(r.compute_dtype);
  j["work_complete"] = r.work_complete;
  j["limits"] = r.limits ? r.limits->to_json() : nlohmann::json();
  j["memory"] = {{"step_start_bytes", r.step_start_bytes}, {"step_peak_bytes", r.step_peak_bytes},
                 {"peak_row", r.peak_row}, {"peak_pass", r.peak_backward ? "bwd" : "fwd"},
                 {"source", r.gpu_timed ? "caching allocator (device)" : "host allocator"}};
  return j;
}

nlohmann::json chrome_trace_json(const ProfileReport& r) {
  constexpr int kPid = 1, kHostTid = 1, kGpuTid = 2;
  nlohmann::json events = nlohmann::json::array();
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", kPid},
                    {"args", {{"name", "minidl " + r.device.str()}}}});
  events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", kPid}, {"tid", kHostTid},
                    {"args", {{"name", "host (steady_clock)"}}}});
  if (r.gpu_timed)
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", kPid}, {"tid", kGpuTid},
                      {"args", {{"name", "GPU stream (CUDA events)"}}}});
  for (const TraceEvent& e : r.trace) {
    nlohmann::json x = {{"name", e.name}, {"cat", e.category}, {"ph", "X"}, {"ts", to_ns(e.ts_us)},
                        {"dur", to_ns(e.dur_us)}, {"pid", kPid}, {"tid", e.gpu ? kGpuTid : kHostTid}};
    if (!e.op.empty()) x["args"] = {{"op", e.op}};
    events.push_back(std::move(x));
  }
  // The allocator's counter: allocated bytes at each boundary and the most held until the next.
  for (const MemorySample& m : r.memory)
    events.push_back({{"name", "allocated MB"}, {"ph", "C"}, {"ts", to_ns(m.ts_us)}, {"pid", kPid},
                      {"args", {{"allocated", m.allocated_bytes / 1e6}, {"peak", m.peak_bytes / 1e6}}}});
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

void write_profile_json(const ProfileReport& r, const std::string& path, std::optional<double> unprofiled_step_ms,
                        std::optional<double> graphed_step_ms) {
  write_text(path, profile_json(r, unprofiled_step_ms, graphed_step_ms).dump(2) + "\n", "profile JSON");
}

void write_chrome_trace(const ProfileReport& r, const std::string& path) {
  write_text(path, chrome_trace_json(r).dump() + "\n", "Chrome trace");
}

}  // namespace minidl
