#include "data/image_folder.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/allocator.h"
#include "core/atomic_file.h"
#include "core/checked_math.h"
#include "core/error.h"
#include "core/json_limits.h"
#include "core/regular_file.h"
#include "data/holdout.h"
#include "data/image_decode.h"
#include "data/loader.h"

namespace minidl {

namespace fs = std::filesystem;

namespace {

// Bumped whenever decoding, fitting or the file layout changes what a cache holds.
constexpr char kCacheMagic[8] = {'M', 'D', 'L', 'I', 'M', 'G', '0', '2'};
// magic, then key, n, c, h, w, meta bytes and the CRC-32 of the labels and pixels.
constexpr int64_t kCacheHeaderBytes = 8 + 8 * 7;
// The shuffle of a folder's images (data/loader.h's epoch_permutation, epoch 0): fixed forever.
constexpr uint64_t kFolderOrderSeed = 0x1f01de5;

struct ImageFile {
  std::string path;  // relative to the split's root: <class>/<...>/<name>
  int64_t size = 0;
  int64_t mtime_ns = 0;
  int32_t label = 0;
};

struct Listing {
  std::string root;
  std::vector<ImageFile> files;
  int64_t ignored = 0;
};

bool is_image_name(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return ext == ".jpg" || ext == ".jpeg" || ext == ".png";
}

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

// The split's root folder (the training root, or the test root).
std::string split_root(const DataOptions& data, Split split) {
  MINIDL_CHECK(!data.dir.empty(), "data.dir: no image folder given");
  const fs::path root(data.dir);
  MINIDL_CHECK(is_dir(root), "data.dir: image folder '", data.dir, "' is not a folder");
  if (!data.test_dir.empty()) {
    if (split == Split::Train) return root.string();
    MINIDL_CHECK(is_dir(data.test_dir), "data.test_dir: '", data.test_dir, "' is not a folder");
    return data.test_dir;
  }
  MINIDL_CHECK(is_dir(root / "train"), "image folder '", data.dir, "': no train/ folder; expected ", data.dir,
               "/train/<class>/*.jpg and ", data.dir, "/test/<class>/*.jpg, or set data.test_dir to train from ",
               data.dir, "/<class>/*.jpg and test from another root");
  if (split == Split::Train) return (root / "train").string();
  if (split == Split::Val) {
    MINIDL_CHECK(image_folder_has_val(data), "image folder '", data.dir, "': no val/ folder beside train/ and test/");
    return (root / "val").string();
  }
  if (is_dir(root / "test")) return (root / "test").string();
  MINIDL_CHECK(is_dir(root / "val"), "image folder '", data.dir, "': no test/ (or val/) folder beside train/");
  return (root / "val").string();
}

std::vector<std::string> sorted_class_folders(const std::string& root) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(root, fs::directory_options::follow_directory_symlink, ec), end; !ec && it != end;
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.empty() || name[0] == '.' || !is_dir(it->path())) continue;
    // A class name is stored in config.json, classes.json and checkpoints, which hold UTF-8 text.
    try {
      (void)nlohmann::json(name).dump();
    } catch (const nlohmann::json::exception&) {
      fail(str("image folder '", root, "': class folder '", text_excerpt(name),
               "' has a name that is not UTF-8 text (class names are stored as text); rename it"));
    }
    names.push_back(name);
  }
  MINIDL_CHECK(!ec, "image folder '", root, "': cannot list it (", ec.message(), ")");
  std::sort(names.begin(), names.end());
  return names;
}

Listing list_split(const std::string& root, const std::vector<std::string>& classes, bool training) {
  Listing out;
  out.root = root;
  const std::vector<std::string> folders = training ? classes : sorted_class_folders(root);
  for (const std::string& folder : folders) {
    const auto it = std::find(classes.begin(), classes.end(), folder);
    MINIDL_CHECK(it != classes.end(), "image folder '", root, "': class folder '", folder,
                 "' is not a class of the training set (", classes.size(), " classes)");
    const int32_t label = static_cast<int32_t>(it - classes.begin());
    std::vector<ImageFile> files;
    std::error_code ec;
    const fs::path dir = fs::path(root) / folder;
    // Symbolic links to folders are followed; one that leads back to a folder it sits in would
    // list that folder's images again and again (or another class's under this label), so the
    // folders on the walk's current path are kept, as (device, inode), to refuse it.
    std::vector<std::pair<dev_t, ino_t>> path_dirs;
    struct stat top {};
    MINIDL_CHECK(::stat(dir.c_str(), &top) == 0, "image folder '", dir.string(), "': cannot read it (",
                 std::strerror(errno), ")");
    path_dirs.emplace_back(top.st_dev, top.st_ino);
    for (fs::recursive_directory_iterator r(dir, fs::directory_options::follow_directory_symlink, ec), end;
         !ec && r != end; r.increment(ec)) {
      const std::string name = r->path().filename().string();
      if (!name.empty() && name[0] == '.') {
        if (r->is_directory()) r.disable_recursion_pending();
        continue;
      }
      struct stat st {};
      if (::stat(r->path().c_str(), &st) != 0) continue;
      if (S_ISDIR(st.st_mode)) {
        path_dirs.resize(static_cast<size_t>(r.depth()) + 1);
        const bool loop = std::find(path_dirs.begin(), path_dirs.end(), std::make_pair(st.st_dev, st.st_ino)) !=
                          path_dirs.end();
        MINIDL_CHECK(!loop, "image folder '", dir.string(), "': '",
                     text_excerpt(r->path().lexically_relative(dir).string()),
                     "' links back to a folder that contains it (a loop); remove the link");
        path_dirs.emplace_back(st.st_dev, st.st_ino);
        continue;
      }
      if (!S_ISREG(st.st_mode)) continue;
      if (!is_image_name(r->path())) {
        ++out.ignored;
        continue;
      }
      ImageFile f;
      f.path = (fs::path(folder) / r->path().lexically_relative(dir)).string();
      f.size = static_cast<int64_t>(st.st_size);
      f.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
      f.label = label;
      files.push_back(std::move(f));
    }
    MINIDL_CHECK(!ec, "image folder '", dir.string(), "': cannot list it (", ec.message(), ")");
    MINIDL_CHECK(!training || !files.empty(), "image folder '", dir.string(),
                 "': class '", folder, "' has no .jpg, .jpeg or .png file");
    std::sort(files.begin(), files.end(), [](const ImageFile& a, const ImageFile& b) { return a.path < b.path; });
    out.files.insert(out.files.end(), files.begin(), files.end());
  }
  MINIDL_CHECK(!out.files.empty(), "image folder '", root, "': no .jpg, .jpeg or .png files in its class folders");
  return out;
}

// FNV-1a, 64 bits: a cache key, not a security boundary (a cache is as trusted as the folder).
struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void bytes(const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  }
  void text(const std::string& s) { bytes(s.c_str(), s.size() + 1); }
  void number(int64_t v) { bytes(&v, sizeof(v)); }
};

uint64_t cache_key(const Listing& l, const DataOptions& data, const std::vector<std::string>& classes) {
  Fnv f;
  f.bytes(kCacheMagic, sizeof(kCacheMagic));
  f.number(data.image_size);
  f.text(to_string(data.resize));
  f.number(data.skip_bad ? 1 : 0);
  for (const std::string& c : classes) f.text(c);
  for (const ImageFile& file : l.files) {
    f.text(file.path);
    f.number(file.size);
    f.number(file.mtime_ns);
    f.number(file.label);
  }
  return f.h;
}

std::string hex(uint64_t v, int digits) {
  static const char* d = "0123456789abcdef";
  std::string s(static_cast<size_t>(digits), '0');
  for (int i = digits - 1; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = d[v & 15];
  return s;
}

std::string cache_folder(const DataOptions& data) {
  return data.cache_dir.empty() ? (fs::path(data.dir) / ".minidl-cache").string() : data.cache_dir;
}

// The cache's name without the key: one root, split, size and fit. Caches of the same prefix and
// another key are stale (the folder changed) and are removed when a new one is written.
std::string cache_prefix(const Listing& l, const DataOptions& data, Split split) {
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(l.root, ec);
  Fnv f;
  f.text(ec ? l.root : canonical.string());
  return str(split_name(split), "-", hex(f.h, 8), "-s", data.image_size, "-", to_string(data.resize), "-");
}

struct CacheMeta {
  int64_t skipped = 0;
  std::vector<std::string> skipped_files;
};

bool read_exact(FILE* in, void* p, int64_t n) {
  return n == 0 || std::fread(p, 1, static_cast<size_t>(n), in) == static_cast<size_t>(n);
}

uint32_t payload_crc32(const Dataset& d) {
  uLong crc = crc32_z(0L, Z_NULL, 0);
  crc = crc32_z(crc, static_cast<const Bytef*>(d.labels.raw_data()), d.labels.nbytes());
  crc = crc32_z(crc, static_cast<const Bytef*>(d.images.raw_data()), d.images.nbytes());
  return static_cast<uint32_t>(crc);
}

// What reading a cache found.
enum class CacheRead {
  Hit,      // `out` holds the cached split
  Missing,  // no file, or one made for another state of the folder (its key differs)
  Damaged,  // a file of this key whose bytes changed: `why` says how
};

// The cached split at `path` for `key`: its labels checked against the class count and its bytes
// against the CRC-32 it was written with (a cache is trusted no more than a checkpoint). A path
// that is not a regular file (a FIFO) is an error naming it, as for every file minidl reads.
CacheRead read_cache(const std::string& path, uint64_t key, int64_t size, int64_t classes, Dataset& out,
                     CacheMeta& meta, std::string& why) {
  if (!path_exists(path)) return CacheRead::Missing;
  const File in = open_regular_file(path, "image cache");
  struct stat st {};
  if (::fstat(::fileno(in.get()), &st) != 0) return CacheRead::Missing;
  const int64_t bytes = static_cast<int64_t>(st.st_size);
  char magic[8];
  int64_t head[7];
  if (bytes < kCacheHeaderBytes || !read_exact(in.get(), magic, 8) || std::memcmp(magic, kCacheMagic, 8) != 0 ||
      !read_exact(in.get(), head, sizeof(head)) || static_cast<uint64_t>(head[0]) != key)
    return CacheRead::Missing;
  const int64_t n = head[1], c = head[2], h = head[3], w = head[4], meta_bytes = head[5];
  why = "its header does not fit its size";
  if (c != 3 || h != size || w != size || n <= 0 || n > (int64_t{1} << 31) || meta_bytes < 0 ||
      meta_bytes > (int64_t{1} << 24) || bytes != kCacheHeaderBytes + meta_bytes + n * 4 + n * c * h * w)
    return CacheRead::Damaged;
  std::string text(static_cast<size_t>(meta_bytes), '\0');
  const nlohmann::json j =
      read_exact(in.get(), text.data(), meta_bytes) ? nlohmann::json::parse(text, nullptr, false) : nlohmann::json();
  why = "its record of skipped files is not JSON";
  if (!j.is_object() || !j.contains("skipped") || !j["skipped"].is_number_integer()) return CacheRead::Damaged;
  meta.skipped = j["skipped"].get<int64_t>();
  if (j.contains("skipped_files") && j["skipped_files"].is_array())
    for (const auto& s : j["skipped_files"])
      if (s.is_string()) meta.skipped_files.push_back(s.get<std::string>());
  out.labels = Tensor::empty({n}, DType::Int32);
  out.images = Tensor::empty({n, c, h, w}, DType::UInt8);
  why = "it could not be read";
  if (!read_exact(in.get(), out.labels.raw_data(), n * 4) ||
      !read_exact(in.get(), out.images.raw_data(), n * c * h * w))
    return CacheRead::Damaged;
  const uint32_t crc = payload_crc32(out);
  if (crc != static_cast<uint32_t>(head[6])) {
    why =
        str("its labels' and pixels' CRC-32 is ", hex(crc, 8), ", written as ", hex(static_cast<uint32_t>(head[6]), 8));
    return CacheRead::Damaged;
  }
  const int32_t* labels = out.labels.data<int32_t>();
  for (int64_t i = 0; i < n; ++i)
    if (labels[i] < 0 || labels[i] >= classes) {
      why = str("image ", i, " has label ", labels[i], ", not one of the ", classes, " classes");
      return CacheRead::Damaged;
    }
  return CacheRead::Hit;
}

void write_cache(const std::string& path, uint64_t key, const Dataset& d, const CacheMeta& meta) {
  const nlohmann::json j = {{"skipped", meta.skipped}, {"skipped_files", meta.skipped_files}, {"classes", d.classes}};
  // A skipped file's name need not be UTF-8: such bytes are replaced (the names are for messages).
  const std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  const int64_t head[7] = {static_cast<int64_t>(key), d.images.size(0), d.images.size(1),
                           d.images.size(2),          d.images.size(3), static_cast<int64_t>(text.size()),
                           payload_crc32(d)};
  AtomicFile f(path, "image cache");
  f.write(kCacheMagic, 8);
  f.write(head, sizeof(head));
  f.write(text.data(), text.size());
  f.write(d.labels.raw_data(), static_cast<size_t>(d.size()) * 4);
  f.write(d.images.raw_data(), static_cast<size_t>(d.images.numel()));
  f.commit();
}

// Decodes and fits every file on all cores. Files that fail leave their message in errors[i], and
// unreadable[i] is set for those that could not be read at all.
Dataset decode_all(const Listing& l, const DataOptions& data, std::vector<std::string>& errors,
                   std::vector<char>& unreadable) {
  const int64_t n = static_cast<int64_t>(l.files.size());
  const int64_t s = data.image_size;
  const FitMode mode = data.resize;
  Dataset d;
  d.images = Tensor::empty({n, 3, s, s}, DType::UInt8);
  d.labels = Tensor::empty({n}, DType::Int32);
  uint8_t* images = d.images.data<uint8_t>();
  int32_t* labels = d.labels.data<int32_t>();
  errors.assign(static_cast<size_t>(n), std::string());
  unreadable.assign(static_cast<size_t>(n), 0);
#pragma omp parallel
  {
    std::vector<uint8_t> buf;
#pragma omp for schedule(dynamic, 32)
    for (int64_t i = 0; i < n; ++i) {
      const ImageFile& f = l.files[static_cast<size_t>(i)];
      labels[i] = f.label;
      const std::string path = (fs::path(l.root) / f.path).string();
      std::string& error = errors[static_cast<size_t>(i)];
      try {
        if (read_image_file(path, buf, error)) {
          const RgbImage im = decode_image(buf.data(), buf.size(), path);
          fit_to_square(im, static_cast<int>(s), mode, images + i * 3 * s * s);
        } else {
          unreadable[static_cast<size_t>(i)] = 1;
        }
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
  }
  return d;
}

// Keeps the images whose error is empty.
Dataset drop_bad(const Dataset& d, const std::vector<std::string>& errors) {
  const int64_t n = d.size(), pixels = d.images.numel() / std::max<int64_t>(1, n);
  int64_t kept = 0;
  for (const std::string& e : errors) kept += e.empty() ? 1 : 0;
  Dataset out;
  out.images = Tensor::empty({kept, d.images.size(1), d.images.size(2), d.images.size(3)}, DType::UInt8);
  out.labels = Tensor::empty({kept}, DType::Int32);
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (!errors[static_cast<size_t>(i)].empty()) continue;
    std::memcpy(out.images.data<uint8_t>() + k * pixels, d.images.data<uint8_t>() + i * pixels,
                static_cast<size_t>(pixels));
    out.labels.data<int32_t>()[k++] = d.labels.data<int32_t>()[i];
  }
  return out;
}

// Removes the caches of `prefix` other than `keep`; they describe an older state of the folder.
void remove_stale_caches(const std::string& folder, const std::string& prefix, const std::string& keep) {
  std::error_code ec;
  for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.find(".tmp.") == std::string::npos && it->path().string() != keep)
      fs::remove(it->path(), ec);
  }
}

// The split is held in memory as 3 x S x S bytes per image (train_limit keeps the first images
// of all of them): a set too large is refused at once, naming the folder and image_size, rather
// than by the allocator's "a tensor of N GB does not fit".
void check_fits_in_memory(const Listing& l, int64_t size) {
  const int64_t n = static_cast<int64_t>(l.files.size());
  const uint64_t bytes =
      static_cast<uint64_t>(checked_mul(n, checked_mul(3 * size, size, "image bytes"), "image bytes"));
  const uint64_t available = bytes < (uint64_t{256} << 20) ? 0 : available_host_bytes();
  if (available == 0 || bytes <= available) return;
  char need[32], have[32];
  std::snprintf(need, sizeof need, "%.1f GB", static_cast<double>(bytes) / 1e9);
  std::snprintf(have, sizeof have, "%.1f GB", static_cast<double>(available) / 1e9);
  fail(str("image folder '", l.root, "': its ", n, " images at data.image_size ", size, " take ", need,
           " of host memory (3 x ", size, " x ", size, " bytes each), more than the ", have,
           " available: lower data.image_size, or train from fewer images"));
}

}  // namespace

bool image_folder_has_val(const DataOptions& data) {
  const fs::path root(data.dir);
  return data.test_dir.empty() && is_dir(root / "test") && is_dir(root / "val");
}

std::vector<std::string> image_folder_classes(const DataOptions& data) {
  const std::string root = split_root(data, Split::Train);
  std::vector<std::string> classes = sorted_class_folders(root);
  MINIDL_CHECK(!classes.empty(), "image folder '", root, "': no class folders (expected ", root,
               "/<class>/*.jpg, one folder per class)");
  return classes;
}

Dataset load_image_folder(const DataOptions& data, Split split, ImageFolderStats* stats, bool class_sorted) {
  MINIDL_CHECK(data.image_size > 0 && data.image_size <= 4096, "data.image_size: expected 1..4096, got ",
               data.image_size);
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<std::string> classes = image_folder_classes(data);
  const Listing listing = list_split(split_root(data, split), classes, split == Split::Train);
  const uint64_t key = cache_key(listing, data, classes);
  const std::string folder = cache_folder(data);
  const std::string prefix = cache_prefix(listing, data, split);
  const std::string path = (fs::path(folder) / (prefix + hex(key, 16) + ".u8")).string();

  check_fits_in_memory(listing, data.image_size);
  ImageFolderStats st;
  st.ignored = listing.ignored;
  Dataset d;
  CacheMeta meta;
  std::string damage;
  const CacheRead cached =
      read_cache(path, key, data.image_size, static_cast<int64_t>(classes.size()), d, meta, damage);
  if (cached == CacheRead::Hit) {
    st.from_cache = true;
    st.cache_path = path;
  } else {
    std::vector<std::string> errors;
    std::vector<char> unreadable;
    d = decode_all(listing, data, errors, unreadable);
    meta = CacheMeta();
    int64_t unread = 0;
    std::string first_unread;
    for (size_t i = 0; i < errors.size(); ++i) {
      const std::string& e = errors[i];
      if (e.empty()) continue;
      MINIDL_CHECK(data.skip_bad, "image folder: ", e,
                   "; set data.skip_bad=true to leave out files that do not decode");
      if (meta.skipped++ < 20) meta.skipped_files.push_back(e);
      if (unreadable[i] && unread++ == 0) first_unread = e;
    }
    if (meta.skipped > 0) d = drop_bad(d, errors);
    MINIDL_CHECK(d.size() > 0, "image folder '", listing.root, "': none of its ", listing.files.size(),
                 " images decodes (the first: ", meta.skipped_files.front(), ")");
    d.classes = classes;
    if (cached == CacheRead::Damaged)
      d.note = str("the image cache ", path, " was damaged (", damage, "); decoded the images again. ");
    std::error_code ec;
    fs::create_directories(folder, ec);
    try {
      MINIDL_CHECK(!ec, "cannot make '", folder, "' (", ec.message(), ")");
      // A file that could not be read (a permission, a network filesystem) may read next time:
      // skipping it for good would be wrong, so nothing is cached and the next run reads again.
      MINIDL_CHECK(unread == 0, unread, " files could not be read, e.g. ", first_unread,
                   "; the next run reads them again");
      write_cache(path, key, d, meta);
      remove_stale_caches(folder, prefix, path);
      st.cache_path = path;
    } catch (const std::exception& e) {
      st.cache_path.clear();
      d.note += unread > 0 ? str("image cache not written: ", e.what(), ". ")
                           : str("image cache not written (", e.what(), "); set data.cache_dir to a writable folder. ");
    }
  }
  d.classes = classes;
  st.skipped = meta.skipped;
  // A fixed pseudo-random order, as the CIFAR binaries' records have: the first images of the set
  // (train_limit, patch whitening's sample, export's --limit) then hold every class.
  const int64_t wanted = split == Split::Train ? data.train_limit : split == Split::Test ? data.test_limit : 0;
  const int64_t limit = wanted > 0 ? std::min(wanted, d.size()) : d.size();
  if (!class_sorted) {
    std::vector<int32_t> order = epoch_permutation(kFolderOrderSeed, 0, d.size());
    order.resize(static_cast<size_t>(limit));
    d = select_images(d, order);
  } else if (limit < d.size()) {
    std::vector<int32_t> identity(static_cast<size_t>(limit));
    for (int64_t i = 0; i < limit; ++i) identity[static_cast<size_t>(i)] = static_cast<int32_t>(i);
    d = select_images(d, identity);
  }
  st.images = d.size();
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%.2f s", st.seconds);
  std::string note =
      str(d.note,
          split == Split::Train ? "training"
          : split == Split::Val ? "validation"
                                : "test",
          " images: ", st.images, " from ", listing.root, " (", classes.size(), " classes, ", data.image_size, "x",
          data.image_size, ", ", st.from_cache ? str("read from the cache ", path, " in ") : std::string("decoded in "),
          seconds, ")");
  if (st.skipped > 0) {
    note += str("; skipped ", st.skipped, " files that do not decode (skip_bad), e.g. ", meta.skipped_files.front());
  }
  if (st.ignored > 0) note += str("; ignored ", st.ignored, " files that are not .jpg, .jpeg or .png");
  d.note = note;
  if (stats) *stats = st;
  return d;
}

}  // namespace minidl
