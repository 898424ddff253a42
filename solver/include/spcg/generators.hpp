#pragma once
// Deterministic SPD test-problem generators (same seed -> same matrix on every machine).
#include <cstdint>
#include <optional>
#include <string>

#include "spcg/csr_matrix.hpp"
#include "spcg/partition.hpp"

namespace spcg {

CsrMatrix poisson2d_5pt(int32_t n);    // n^2 rows, diag 4, neighbours -1 (Dirichlet)
CsrMatrix poisson2d_9pt(int32_t n);    // n^2 rows, diag 8, 8 neighbours -1
CsrMatrix poisson3d_7pt(int32_t n);    // n^3 rows, diag 6, 6 neighbours -1
CsrMatrix poisson3d_27pt(int32_t n);   // n^3 rows, diag 26, 26 neighbours -1
// 7-point stencil with coefficients (1, ay, az) in x, y, z: diag 2(1+ay+az).
CsrMatrix anisotropic3d(int32_t n, double ay = 0.1, double az = 0.01);
// Shifted weighted graph Laplacian of a random graph whose degrees follow a power law (Pareto, exponent
// `alpha`), so a few rows are very long (> 1000 entries for n >= 1e5) and most are short.
// Diagonal = sum of off-diagonal magnitudes + 1: strictly diagonally dominant, hence SPD.
CsrMatrix powerlaw_spd(int32_t n, uint64_t seed = 42, double alpha = 1.6, int32_t min_degree = 2);
// 3D diffusion -div(k grad u) on the unit cube, n^3 cells, Dirichlet boundary, cell-centred finite volumes
// (7-point): the coefficient k is 1 with kJump3dBoxes random boxes (sides n/8 to n/3 cells, seeded) of
// 10^e, e uniform in {-3, ..., 3}, later boxes over earlier ones; a face between two cells carries the harmonic
// mean of their coefficients, a boundary face twice the cell's. Jumps of up to 1e6 across faces: the problem
// where Jacobi-CG struggles and AMG does not (Vanek, Mandel and Brezina 1996 use the like).
CsrMatrix jump3d(int32_t n, uint64_t seed = 1);
constexpr int kJump3dBoxes = 16;

// The stencils' largest sides: at most 2^40 rows, made a rank's share at a time (2^20 squared, 10321 cubed).
constexpr int32_t kMaxStencilSide2d = 1 << 20;
constexpr int32_t kMaxStencilSide3d = 10321;

// Parses "poisson2d:N", "poisson2d9:N", "poisson3d:N", "poisson3d27:N", "aniso3d:N",
// "jump3d:N[:seed]", "powerlaw:N[:seed]". Throws InputError naming the spec when it is not one of these.
CsrMatrix generate(const std::string& spec);
bool looks_like_generator(const std::string& spec);
// The rows of generate(spec), without making it.
int64_t generated_rows(const std::string& spec);
// Rows [row_begin, row_end) of generate(spec), with global (64-bit) columns: one rank's share on several GPUs.
// The stencils make only those rows (a whole 1000^3 grid passes int32's nonzeros, a 1300^3 one its rows; a share
// need not); jump3d and powerlaw are made whole and cut. InputError naming the spec for a range outside the
// matrix, or one whose rows or entries pass int32.
GlobalRows generate_rows(const std::string& spec, int64_t row_begin, int64_t row_end);
// The same rows with 32-bit global columns (rows x the whole matrix's columns), for a system whose rows fit int32:
// a rank's share then splits in place (rank_blocks_from_rows of a CsrMatrix), in 12 bytes an entry where
// generate_rows' 64-bit columns take 16 and a new array for the local ones. InputError past int32's rows.
CsrMatrix generate_rows_narrow(const std::string& spec, int64_t row_begin, int64_t row_end);
// The same rows of a stencil with 32-bit columns less column_base (set here: row_begin less the stencil's reach in
// the row order, at least 0), rows.cols the span they reach: a rank's share of a system past 2^31 rows, split in
// place as generate_rows_narrow's are (generated_share), in 12 bytes an entry where generate_rows takes 16 and a
// second array. Nothing (std::nullopt) for a generator made whole (never past 2^31 rows), a range outside the
// grid, or a span past int32 (generate_rows takes those).
std::optional<CsrMatrix> generate_rows_window(const std::string& spec, int64_t row_begin, int64_t row_end,
                                              int64_t& column_base);
std::string generator_help();

// n x k values uniform in [-1, 1) drawn in row-major order from SplitMix64(seed): the random right-hand sides
// (the device fill launch_fill_splitmix_uniform gives the same bits).
DenseBlock random_block(int32_t n, int32_t k, uint64_t seed);

// Deterministic 64-bit generator (splitmix64), used for matrices and right-hand sides alike.
struct SplitMix64 {
  uint64_t state;
  explicit SplitMix64(uint64_t seed) : state(seed) {}
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) * (1.0 / 9007199254740992.0); }  // [0, 1)
};

}  // namespace spcg
