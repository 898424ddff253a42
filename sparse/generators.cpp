#include "spcg/generators.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string_view>
#include <type_traits>

#include "spcg/error.hpp"
#include "sparse/parallel.hpp"

namespace spcg {
namespace {

// Builds a stencil matrix on an nx x ny x nz grid directly in row order (already sorted, no triplets):
// offsets are visited in increasing linear-index order, so each row's columns come out sorted.
struct StencilPoint {
  int dx, dy, dz;
  double value;
};

// Rows [row_begin, row_end) of the stencil matrix into `a` (a CsrMatrix for the whole grid, GlobalRows for a
// rank's share, whose columns are 64-bit): a rank builds its own rows only, so the whole grid may pass 2^31 rows
// while each rank's share of rows and entries fits int32.
template <class Rows>
void fill_stencil_rows(Rows& a, int32_t nx, int32_t ny, int32_t nz, std::vector<StencilPoint> pts, const char* name,
                       int64_t row_begin, int64_t row_end, int64_t column_base = 0) {
  using Column = typename std::remove_reference_t<decltype(a.col_idx)>::value_type;
  const int64_t n = int64_t{nx} * ny * nz;
  if (nx < 0 || ny < 0 || nz < 0) throw InputError(name, 0, "grid size must be non-negative");
  if (row_begin < 0 || row_begin > row_end || row_end > n)
    throw InputError(name, 0, "rows [" + std::to_string(row_begin) + ", " + std::to_string(row_end) + ") outside the grid's " +
                                  std::to_string(n));
  if (row_end - row_begin > std::numeric_limits<int32_t>::max())
    throw InputError(name, 0, std::to_string(row_end - row_begin) + " rows in one piece: more than int32 allows (use more ranks)");
  std::sort(pts.begin(), pts.end(), [&](const StencilPoint& a, const StencilPoint& b) {
    return (int64_t{a.dz} * ny + a.dy) * nx + a.dx < (int64_t{b.dz} * ny + b.dy) * nx + b.dx;
  });
  // Whole grid (one GPU's matrix): the exact count (boundary rows are shorter) refuses an over-large grid before
  // any work. A rank's row range may pass int32's entries (its row offsets are 64-bit).
  if (row_begin == 0 && row_end == n) {
    int64_t exact = 0;
    for (const auto& p : pts)
      exact += int64_t{std::max(0, nx - std::abs(p.dx))} * std::max(0, ny - std::abs(p.dy)) *
               std::max(0, nz - std::abs(p.dz));
    if (exact > std::numeric_limits<int32_t>::max())
      throw InputError(name, 0, "matrix has " + std::to_string(exact) + " nonzeros, more than int32 indexing allows");
  }
  a.rows = static_cast<int32_t>(row_end - row_begin);
  a.row_ptr.resize(static_cast<size_t>(a.rows) + 1);
  a.row_ptr[0] = 0;
  // Rows in parts on every core: the lengths, their prefix sum, then the entries in place (a rank's share of
  // poisson3d:600 is 100M rows; one thread takes ~15 s).
  const int64_t rows = row_end - row_begin, plane = int64_t{nx} * ny;
  const int64_t parts = rows >= (int64_t{1} << 16) ? 8 * int64_t{hardware_threads()} : 1;
  auto for_rows = [&](auto&& body) {  // body(row, x, y, z) over every row, part by part
    parallel_for(parts, hardware_threads(), [&](int64_t part) {
      const int64_t b = row_begin + even_split(rows, parts, part), e = row_begin + even_split(rows, parts, part + 1);
      if (b == e) return;
      int32_t z = static_cast<int32_t>(b / plane), y = static_cast<int32_t>(b % plane / nx), x = static_cast<int32_t>(b % nx);
      for (int64_t row = b; row < e; ++row) {
        body(row, x, y, z);
        if (++x == nx) {
          x = 0;
          if (++y == ny) y = 0, ++z;
        }
      }
    });
  };
  auto inside = [&](const StencilPoint& p, int32_t x, int32_t y, int32_t z) {
    const int32_t xx = x + p.dx, yy = y + p.dy, zz = z + p.dz;
    return xx >= 0 && xx < nx && yy >= 0 && yy < ny && zz >= 0 && zz < nz;
  };
  for_rows([&](int64_t row, int32_t x, int32_t y, int32_t z) {
    int32_t count = 0;
    for (const auto& p : pts) count += inside(p, x, y, z);
    a.row_ptr[static_cast<size_t>(row - row_begin) + 1] = count;
  });
  RowOffset total = 0;
  for (size_t i = 1; i < a.row_ptr.size(); ++i) total += a.row_ptr[i], a.row_ptr[i] = total;
  a.col_idx.resize(static_cast<size_t>(total));
  a.values.resize(static_cast<size_t>(total));
  for_rows([&](int64_t row, int32_t x, int32_t y, int32_t z) {
    RowOffset at = a.row_ptr[static_cast<size_t>(row - row_begin)];
    for (const auto& p : pts)
      if (inside(p, x, y, z)) {
        a.col_idx[static_cast<size_t>(at)] =
            static_cast<Column>((int64_t{z + p.dz} * ny + (y + p.dy)) * nx + (x + p.dx) - column_base);
        a.values[static_cast<size_t>(at++)] = p.value;
      }
  });
}

// The whole stencil matrix (int32 rows and entries).
CsrMatrix stencil_matrix(int32_t nx, int32_t ny, int32_t nz, std::vector<StencilPoint> pts, const char* name) {
  const int64_t n = int64_t{nx} * ny * nz;
  if (n > std::numeric_limits<int32_t>::max())
    throw InputError(name, 0, std::to_string(n) + " rows: more than one GPU's int32 indexing allows (several GPUs take it)");
  CsrMatrix a;
  fill_stencil_rows(a, nx, ny, nz, std::move(pts), name, 0, std::max<int64_t>(n, 0));
  a.cols = a.rows;
  return a;
}

std::vector<StencilPoint> poisson2d_5pt_points() {
  return {{0, 0, 0, 4}, {-1, 0, 0, -1}, {1, 0, 0, -1}, {0, -1, 0, -1}, {0, 1, 0, -1}};
}
std::vector<StencilPoint> poisson2d_9pt_points() {
  std::vector<StencilPoint> p;
  for (int dy = -1; dy <= 1; ++dy)
    for (int dx = -1; dx <= 1; ++dx) p.push_back({dx, dy, 0, (dx == 0 && dy == 0) ? 8.0 : -1.0});
  return p;
}
std::vector<StencilPoint> poisson3d_7pt_points() {
  return {{0, 0, 0, 6}, {-1, 0, 0, -1}, {1, 0, 0, -1}, {0, -1, 0, -1}, {0, 1, 0, -1}, {0, 0, -1, -1}, {0, 0, 1, -1}};
}
std::vector<StencilPoint> poisson3d_27pt_points() {
  std::vector<StencilPoint> p;
  for (int dz = -1; dz <= 1; ++dz)
    for (int dy = -1; dy <= 1; ++dy)
      for (int dx = -1; dx <= 1; ++dx) p.push_back({dx, dy, dz, (dx == 0 && dy == 0 && dz == 0) ? 26.0 : -1.0});
  return p;
}
std::vector<StencilPoint> anisotropic3d_points(double ay, double az) {
  return {{0, 0, 0, 2 * (1 + ay + az)}, {-1, 0, 0, -1}, {1, 0, 0, -1}, {0, -1, 0, -ay}, {0, 1, 0, -ay},
          {0, 0, -1, -az}, {0, 0, 1, -az}};
}

int32_t parse_size(const std::string& spec, std::string_view text, int64_t max_value) {
  int64_t v = 0;
  bool ok = !text.empty();
  for (char c : text) {
    if (c < '0' || c > '9') { ok = false; break; }
    v = v * 10 + (c - '0');
    if (v > max_value) throw InputError(spec, 0, "size " + std::string(text) + " too large (max " + std::to_string(max_value) + ")");
  }
  if (!ok) throw InputError(spec, 0, "expected a non-negative integer size, got '" + std::string(text) + "'");
  return static_cast<int32_t>(v);
}

}  // namespace

CsrMatrix poisson2d_5pt(int32_t n) { return stencil_matrix(n, n, 1, poisson2d_5pt_points(), "poisson2d"); }
CsrMatrix poisson2d_9pt(int32_t n) { return stencil_matrix(n, n, 1, poisson2d_9pt_points(), "poisson2d9"); }
CsrMatrix poisson3d_7pt(int32_t n) { return stencil_matrix(n, n, n, poisson3d_7pt_points(), "poisson3d"); }
CsrMatrix poisson3d_27pt(int32_t n) { return stencil_matrix(n, n, n, poisson3d_27pt_points(), "poisson3d27"); }
CsrMatrix anisotropic3d(int32_t n, double ay, double az) {
  return stencil_matrix(n, n, n, anisotropic3d_points(ay, az), "aniso3d");
}

CsrMatrix jump3d(int32_t n, uint64_t seed) {
  if (n < 0) throw InputError("jump3d", 0, "grid size must be non-negative");
  const int64_t cells = int64_t{n} * n * n;
  if (cells * 7 > std::numeric_limits<int32_t>::max()) throw InputError("jump3d", 0, "grid has more nonzeros than int32 allows");
  std::vector<double> k(static_cast<size_t>(cells), 1.0);
  SplitMix64 rng(seed);
  for (int b = 0; b < kJump3dBoxes && n > 0; ++b) {
    int32_t lo[3], hi[3];
    for (int d = 0; d < 3; ++d) {
      const int32_t side = std::max<int32_t>(1, n / 8 + static_cast<int32_t>(rng.next() % static_cast<uint64_t>(std::max(1, n / 3 - n / 8 + 1))));
      lo[d] = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(std::max(1, n - side + 1)));
      hi[d] = std::min(n, lo[d] + side);
    }
    const double value = std::pow(10.0, static_cast<double>(static_cast<int>(rng.next() % 7) - 3));
    for (int32_t z = lo[2]; z < hi[2]; ++z)
      for (int32_t y = lo[1]; y < hi[1]; ++y)
        for (int32_t x = lo[0]; x < hi[0]; ++x) k[static_cast<size_t>((int64_t{z} * n + y) * n + x)] = value;
  }
  auto harmonic = [](double a, double b) { return 2.0 * a * b / (a + b); };
  CsrMatrix a;
  a.rows = a.cols = static_cast<int32_t>(cells);
  a.row_ptr.assign(static_cast<size_t>(cells) + 1, 0);
  a.col_idx.reserve(static_cast<size_t>(cells) * 7);
  a.values.reserve(static_cast<size_t>(cells) * 7);
  const int32_t step[3] = {1, n, n * n};
  int64_t row = 0;
  for (int32_t z = 0; z < n; ++z)
    for (int32_t y = 0; y < n; ++y)
      for (int32_t x = 0; x < n; ++x, ++row) {
        const int32_t at[3] = {x, y, z};
        const double kc = k[static_cast<size_t>(row)];
        // neighbours in column order: -z, -y, -x, centre, +x, +y, +z
        double diag = 0;
        double off[6] = {0, 0, 0, 0, 0, 0};
        bool inside[6] = {false, false, false, false, false, false};
        for (int d = 0; d < 3; ++d)
          for (int side = 0; side < 2; ++side) {
            const int slot = side == 0 ? 2 - d : 3 + d;
            const int32_t c = at[d] + (side == 0 ? -1 : 1);
            if (c < 0 || c >= n) {
              diag += 2.0 * kc;  // Dirichlet: the boundary value sits half a cell away
              continue;
            }
            const double face = harmonic(kc, k[static_cast<size_t>(row + (side == 0 ? -step[d] : step[d]))]);
            off[slot] = -face, inside[slot] = true;
            diag += face;
          }
        for (int slot = 0; slot < 3; ++slot)
          if (inside[slot]) {
            const int d = 2 - slot;
            a.col_idx.push_back(static_cast<int32_t>(row - step[d])), a.values.push_back(off[slot]);
          }
        a.col_idx.push_back(static_cast<int32_t>(row)), a.values.push_back(diag);
        for (int slot = 3; slot < 6; ++slot)
          if (inside[slot]) {
            const int d = slot - 3;
            a.col_idx.push_back(static_cast<int32_t>(row + step[d])), a.values.push_back(off[slot]);
          }
        a.row_ptr[static_cast<size_t>(row) + 1] = static_cast<int32_t>(a.col_idx.size());
      }
  return a;
}

CsrMatrix powerlaw_spd(int32_t n, uint64_t seed, double alpha, int32_t min_degree) {
  if (n < 0) throw InputError("powerlaw", 0, "size must be non-negative");
  SplitMix64 rng(seed);
  // Out-degree of row i ~ Pareto(min_degree, alpha), capped; each out-edge picks a uniform partner.
  // Symmetrising adds the partner's side; the long rows keep their length, partners gain O(1) each.
  const int64_t cap = std::max<int64_t>(1, std::min<int64_t>(n - 1, 20000));
  std::vector<int32_t> ti, tj;
  std::vector<double> tv;
  int64_t edges = 0;
  std::vector<int32_t> deg(n);
  for (int32_t i = 0; i < n; ++i) {
    const double u = 1.0 - rng.uniform();  // (0, 1]
    const double d = min_degree * std::pow(u, -1.0 / alpha);
    deg[i] = n > 1 ? static_cast<int32_t>(std::min<double>(cap, std::floor(d))) : 0;
    edges += deg[i];
  }
  if (2 * edges + n > std::numeric_limits<int32_t>::max())
    throw InputError("powerlaw", 0, "matrix would not fit in int32 indexing");
  ti.reserve(2 * edges);
  tj.reserve(2 * edges);
  tv.reserve(2 * edges);
  for (int32_t i = 0; i < n; ++i)
    for (int32_t e = 0; e < deg[i]; ++e) {
      int32_t j = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(n));
      if (j == i) j = (j + 1) % n;
      const double w = -(0.5 + rng.uniform());  // negative weights: a Laplacian's off-diagonals
      ti.push_back(i), tj.push_back(j), tv.push_back(w);
      ti.push_back(j), tj.push_back(i), tv.push_back(w);
    }
  CsrMatrix off = csr_from_triplets(n, n, ti, tj, tv);  // duplicates summed: still symmetric
  ti.clear(), tj.clear(), tv.clear();
  ti.shrink_to_fit(), tj.shrink_to_fit(), tv.shrink_to_fit();
  // Insert the diagonal into each (sorted) row.
  CsrMatrix a;
  a.rows = a.cols = n;
  a.row_ptr.assign(static_cast<size_t>(n) + 1, 0);
  a.col_idx.reserve(off.nnz() + n);
  a.values.reserve(off.nnz() + n);
  for (int32_t i = 0; i < n; ++i) {
    double sum = 0;
    for (int32_t p = off.row_ptr[i]; p < off.row_ptr[i + 1]; ++p) sum += std::abs(off.values[p]);
    bool placed = false;
    for (int32_t p = off.row_ptr[i]; p < off.row_ptr[i + 1]; ++p) {
      if (!placed && off.col_idx[p] > i) {
        a.col_idx.push_back(i), a.values.push_back(sum + 1.0), placed = true;
      }
      a.col_idx.push_back(off.col_idx[p]), a.values.push_back(off.values[p]);
    }
    if (!placed) a.col_idx.push_back(i), a.values.push_back(sum + 1.0);
    a.row_ptr[i + 1] = static_cast<int32_t>(a.col_idx.size());
  }
  return a;
}

bool looks_like_generator(const std::string& spec) {
  for (const char* p : {"poisson2d:", "poisson2d9:", "poisson3d:", "poisson3d27:", "aniso3d:", "jump3d:", "powerlaw:"})
    if (spec.rfind(p, 0) == 0) return true;
  return false;
}

std::string generator_help() {
  return "poisson2d:N (5-point), poisson2d9:N, poisson3d:N (7-point), poisson3d27:N, aniso3d:N, jump3d:N[:seed] "
         "(coefficient jumps 1e-3..1e3), powerlaw:N[:seed]";
}

namespace {

// A parsed generator spec: its kind, grid size and seed.
struct GeneratorSpec {
  std::string kind;
  int32_t n = 0;
  uint64_t seed = 0;
};

GeneratorSpec parse_generator(const std::string& spec) {
  const auto colon = spec.find(':');
  if (colon == std::string::npos)
    throw InputError(spec, 0, "not a generator spec; expected one of " + generator_help());
  GeneratorSpec g;
  g.kind = spec.substr(0, colon);
  std::string rest = spec.substr(colon + 1);
  if (g.kind == "powerlaw" || g.kind == "jump3d") {  // N[:seed]
    const auto c2 = rest.find(':');
    g.seed = g.kind == "powerlaw" ? 42 : 1;
    if (c2 != std::string::npos) {
      g.seed = static_cast<uint64_t>(parse_size(spec, std::string_view(rest).substr(c2 + 1), 2147483647));
      rest = rest.substr(0, c2);
    }
    g.n = parse_size(spec, rest, g.kind == "jump3d" ? 1290 : 200000000);
    return g;
  }
  // the stencils: up to 2^40 rows (several GPUs make a share each; one GPU's whole matrix stops at int32's rows)
  if (g.kind == "poisson2d" || g.kind == "poisson2d9") g.n = parse_size(spec, rest, kMaxStencilSide2d);
  else if (g.kind == "poisson3d" || g.kind == "aniso3d" || g.kind == "poisson3d27") g.n = parse_size(spec, rest, kMaxStencilSide3d);
  else throw InputError(spec, 0, "unknown generator '" + g.kind + "'; expected one of " + generator_help());
  return g;
}

// The stencil of a stencil generator, with its grid; false for the others.
bool stencil_of(const GeneratorSpec& g, std::vector<StencilPoint>& pts, int32_t& nz) {
  nz = g.n;
  if (g.kind == "poisson2d") pts = poisson2d_5pt_points(), nz = 1;
  else if (g.kind == "poisson2d9") pts = poisson2d_9pt_points(), nz = 1;
  else if (g.kind == "poisson3d") pts = poisson3d_7pt_points();
  else if (g.kind == "poisson3d27") pts = poisson3d_27pt_points();
  else if (g.kind == "aniso3d") pts = anisotropic3d_points(0.1, 0.01);
  else return false;
  return true;
}

}  // namespace

CsrMatrix generate(const std::string& spec) {
  const GeneratorSpec g = parse_generator(spec);
  if (g.kind == "jump3d") return jump3d(g.n, g.seed);
  if (g.kind == "powerlaw") return powerlaw_spd(g.n, g.seed);
  std::vector<StencilPoint> pts;
  int32_t nz = 0;
  stencil_of(g, pts, nz);
  return stencil_matrix(g.n, g.n, nz, pts, g.kind.c_str());
}

int64_t generated_rows(const std::string& spec) {
  const GeneratorSpec g = parse_generator(spec);
  if (g.kind == "powerlaw") return g.n;
  if (g.kind == "poisson2d" || g.kind == "poisson2d9") return int64_t{g.n} * g.n;
  return int64_t{g.n} * g.n * g.n;
}

namespace {

// generate_rows into Rows (GlobalRows: 64-bit columns; CsrMatrix: 32-bit ones, rows.cols the whole matrix's).
template <class Rows>
Rows rows_of_generator(const std::string& spec, int64_t row_begin, int64_t row_end) {
  const GeneratorSpec g = parse_generator(spec);
  std::vector<StencilPoint> pts;
  int32_t nz = 0;
  Rows s;
  auto set_columns = [&](int64_t cols) {
    if constexpr (std::is_same_v<Rows, GlobalRows>) s.first_row = row_begin, s.global_cols = cols;
    else s.cols = static_cast<int32_t>(cols);
  };
  if (stencil_of(g, pts, nz)) {
    const int64_t n = int64_t{g.n} * g.n * nz;
    if (!std::is_same_v<Rows, GlobalRows> && n > std::numeric_limits<int32_t>::max())
      throw InputError(spec, 0, std::to_string(n) + " rows: past 32-bit columns (generate_rows' 64-bit ones take it)");
    set_columns(n);
    fill_stencil_rows(s, g.n, g.n, nz, pts, g.kind.c_str(), row_begin, row_end);
    return s;
  }
  // the others (random boxes, a random graph) are made whole, and the rows cut out
  const CsrMatrix a = generate(spec);
  if (row_begin < 0 || row_begin > row_end || row_end > a.rows)
    throw InputError(spec, 0, "rows [" + std::to_string(row_begin) + ", " + std::to_string(row_end) + ") outside its " +
                                  std::to_string(a.rows));
  const int32_t b = static_cast<int32_t>(row_begin), e = static_cast<int32_t>(row_end);
  set_columns(a.cols);
  s.rows = e - b;
  s.row_ptr.resize(static_cast<size_t>(s.rows) + 1);
  for (int32_t i = b; i <= e; ++i) s.row_ptr[static_cast<size_t>(i - b)] = a.row_ptr[i] - a.row_ptr[b];
  s.col_idx.assign(a.col_idx.begin() + a.row_ptr[b], a.col_idx.begin() + a.row_ptr[e]);
  s.values.assign(a.values.begin() + a.row_ptr[b], a.values.begin() + a.row_ptr[e]);
  return s;
}

}  // namespace

GlobalRows generate_rows(const std::string& spec, int64_t row_begin, int64_t row_end) {
  return rows_of_generator<GlobalRows>(spec, row_begin, row_end);
}

CsrMatrix generate_rows_narrow(const std::string& spec, int64_t row_begin, int64_t row_end) {
  return rows_of_generator<CsrMatrix>(spec, row_begin, row_end);
}

std::optional<CsrMatrix> generate_rows_window(const std::string& spec, int64_t row_begin, int64_t row_end,
                                              int64_t& column_base) {
  const GeneratorSpec g = parse_generator(spec);
  std::vector<StencilPoint> pts;
  int32_t nz = 0;
  if (!stencil_of(g, pts, nz)) return std::nullopt;  // (made whole: below 2^31 rows, generate_rows_narrow's)
  const int64_t n = int64_t{g.n} * g.n * nz;
  int64_t reach = 0;  // the farthest column from its row, in the row order
  for (const StencilPoint& p : pts) reach = std::max(reach, std::abs((int64_t{p.dz} * g.n + p.dy) * g.n + p.dx));
  const int64_t base = std::max<int64_t>(0, row_begin - reach), top = std::min(n, row_end + reach);
  if (row_begin < 0 || row_begin > row_end || row_end > n || top - base > std::numeric_limits<int32_t>::max())
    return std::nullopt;  // (a range outside the grid: generate_rows names it)
  CsrMatrix s;
  s.cols = static_cast<int32_t>(top - base);
  fill_stencil_rows(s, g.n, g.n, nz, pts, g.kind.c_str(), row_begin, row_end, base);
  column_base = base;
  return s;
}

DenseBlock random_block(int32_t n, int32_t k, uint64_t seed) {
  DenseBlock b(n, k);
  SplitMix64 rng(seed);
  for (double& v : b.data) v = 2.0 * rng.uniform() - 1.0;
  return b;
}

}  // namespace spcg
