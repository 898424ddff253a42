// The reader's text: a plain file read by byte range (pread), a gzip file inflated into memory first
// (libdeflate, else zlib), or text a caller holds.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#ifdef SPCG_HAVE_LIBDEFLATE
#include <libdeflate.h>
#endif

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "sparse/mm_internal.hpp"
#include "sparse/parallel.hpp"

namespace spcg {
namespace mm {
namespace {

[[maybe_unused]] std::string inflate_with_zlib(const std::string& path, const char* data, size_t size, uint64_t max_bytes) {
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 32) != Z_OK) throw InputError(path, 0, "cannot initialise gzip decoder");
  std::string out;
  out.resize(std::min<uint64_t>(max_bytes, std::max<uint64_t>(size * 4, 1 << 16)));
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data));
  zs.avail_in = static_cast<uInt>(size);
  size_t produced = 0;
  int rc = Z_OK;
  while (rc != Z_STREAM_END) {
    if (produced == out.size()) {
      if (out.size() >= max_bytes) {
        inflateEnd(&zs);
        throw InputError(path, 0, "decompressed size exceeds " + std::to_string(max_bytes) + " bytes");
      }
      out.resize(std::min<uint64_t>(max_bytes, out.size() * 2));
    }
    zs.next_out = reinterpret_cast<Bytef*>(out.data() + produced);
    zs.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - produced, 1u << 30));
    rc = inflate(&zs, Z_NO_FLUSH);
    produced = zs.total_out;
    if (rc == Z_STREAM_END) break;
    if (rc != Z_OK && !(rc == Z_BUF_ERROR && zs.avail_out == 0)) {
      inflateEnd(&zs);
      throw InputError(path, 0, "corrupt or truncated gzip data");
    }
    if (zs.avail_in == 0 && zs.avail_out != 0) {
      inflateEnd(&zs);
      throw InputError(path, 0, "truncated gzip data");
    }
  }
  inflateEnd(&zs);
  out.resize(produced);
  return out;
}

}  // namespace

TextSource::TextSource(const std::string& path, uint64_t max_bytes, int threads, ReadProfile& profile) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const auto st = fs::status(path, ec);
  if (ec || !fs::exists(st)) throw InputError(path, 0, "no such file");
  if (fs::is_directory(st)) throw InputError(path, 0, "is a directory, expected a Matrix Market file");
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw InputError(path, 0, std::string("cannot open file for reading: ") + std::strerror(errno));
  struct stat sb {};
  if (fstat(fd_, &sb) != 0) throw InputError(path, 0, "cannot stat file");
  size_ = static_cast<size_t>(sb.st_size);
  profile.file_bytes = size_;
  unsigned char magic[2] = {0, 0};
  const bool gzip = size_ >= 2 && ::pread(fd_, magic, 2, 0) == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  if (gzip) {
    HostVector<char> raw;
    raw.resize(size_);
    parallel_for(static_cast<int64_t>((size_ + kReadSlice - 1) / kReadSlice), threads, [&](int64_t s) {
      const size_t at = static_cast<size_t>(s) * kReadSlice;
      read_exactly(path, raw.data() + at, at, std::min(size_, at + kReadSlice));
    });
    inflate_gzip(path, raw, max_bytes, profile);
    memory_ = std::string_view(inflated_.data(), size_);
    in_memory_ = true;
  } else {
    if (size_ > max_bytes) throw InputError(path, 0, "file larger than " + std::to_string(max_bytes) + " bytes");
    posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
    profile.access = "read";
  }
  path_ = path;
}

TextSource::~TextSource() {
  if (fd_ >= 0) ::close(fd_);
}

void TextSource::read_exactly(const std::string& path, char* to, size_t a, size_t b) const {
  while (a < b) {
    const ssize_t got = ::pread(fd_, to, b - a, static_cast<off_t>(a));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0)
      throw InputError(path, 0, std::string("read error: ") + (got == 0 ? "file shrank while read" : std::strerror(errno)));
    a += static_cast<size_t>(got), to += got;
  }
}

void TextSource::inflate_gzip(const std::string& path, const HostVector<char>& raw, uint64_t max_bytes,
                              ReadProfile& profile) {
  const size_t size = raw.size();
#ifdef SPCG_HAVE_LIBDEFLATE
  // Whole members in memory: libdeflate inflates 2-3x faster than zlib. The trailer's ISIZE (size mod 2^32
  // of the last member) is the first guess of the output size; the buffer doubles until every member fits.
  profile.access = "libdeflate";
  const auto* in = reinterpret_cast<const unsigned char*>(raw.data());
  uint64_t guess = size >= 18 ? uint64_t{in[size - 4]} | uint64_t{in[size - 3]} << 8 |
                                    uint64_t{in[size - 2]} << 16 | uint64_t{in[size - 1]} << 24
                              : 0;
  // deflate expands at most ~1032:1; a truncated file's last four bytes are not a size at all
  guess = std::min<uint64_t>({max_bytes, uint64_t{size} * 1032 + 1024,
                              std::max<uint64_t>({guess + 1, uint64_t{size} * 4, 1 << 16})});
  std::unique_ptr<libdeflate_decompressor, void (*)(libdeflate_decompressor*)> d(libdeflate_alloc_decompressor(),
                                                                                 libdeflate_free_decompressor);
  if (!d) throw InputError(path, 0, "cannot initialise gzip decoder");
  for (uint64_t capacity = guess;; capacity = std::min<uint64_t>(max_bytes, capacity * 2)) {
    HostVector<char>().swap(inflated_);
    inflated_.resize(capacity);
    size_t in_pos = 0, out_pos = 0;
    bool too_small = false;
    while (in_pos < size) {
      size_t used_in = 0, produced = 0;
      const libdeflate_result r = libdeflate_gzip_decompress_ex(d.get(), in + in_pos, size - in_pos,
                                                                inflated_.data() + out_pos, capacity - out_pos,
                                                                &used_in, &produced);
      if (r == LIBDEFLATE_INSUFFICIENT_SPACE) {
        too_small = true;
        break;
      }
      if (r != LIBDEFLATE_SUCCESS) throw InputError(path, 0, "corrupt or truncated gzip data");
      in_pos += used_in, out_pos += produced;
    }
    if (!too_small) {
      size_ = out_pos;
      return;
    }
    if (capacity >= max_bytes)
      throw InputError(path, 0, "decompressed size exceeds " + std::to_string(max_bytes) + " bytes");
  }
#else
  profile.access = "zlib";
  const std::string out = inflate_with_zlib(path, raw.data(), size, max_bytes);
  inflated_.assign(out.begin(), out.end());
  size_ = out.size();
#endif
}

}  // namespace mm

const char* gzip_inflater() {
#ifdef SPCG_HAVE_LIBDEFLATE
  return "libdeflate";
#else
  return "zlib";
#endif
}

std::string load_file_text(const std::string& path, uint64_t max_bytes) {
  ReadProfile ignored;
  mm::TextSource f(path, max_bytes, 1, ignored);
  HostVector<char> scratch;
  return std::string(f.range(0, f.size(), scratch));
}

}  // namespace spcg
