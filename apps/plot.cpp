// spcg solve --plot FILE.svg: the report as a picture, written without a plotting library. The residual history of
// every column (||r_j|| / ||b_j||, log scale, the stop target dashed), the same picture python's result.plot()
// draws; on several GPUs a second panel with each rank's phases as stacked bars (problem, NCCL's start, setup,
// solve), where an imbalance between the ranks shows at a glance.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "apps/report.hpp"

namespace spcg {
namespace {

struct PlotLayout {
  static constexpr double width = 760, height = 460, left = 70, right = 20, top = 40, bottom = 50;
  static constexpr double rank_bar = 22;   // one rank's bar in the phases panel
  static constexpr int max_columns = 64;   // columns drawn (a 4096-column block would be one grey smear)
};

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

std::string escaped(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '<' ? "&lt;" : c == '>' ? "&gt;" : c == '&' ? "&amp;" : c == '"' ? "&quot;" : std::string(1, c);
  return o;
}

// A relative residual a log scale can place: positive and finite (rn / ||b|| may underflow to 0 or overflow).
bool drawable(double rel) { return rel > 0 && std::isfinite(rel); }

const char* colour(int j) {
  static const char* palette[] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf"};
  return palette[j % 8];
}

// Each rank's phases as stacked horizontal bars, below the history.
std::string rank_panel(const SolveReport& r, double y0) {
  using L = PlotLayout;
  double longest = 0;
  for (const RankLine& l : r.ranks) longest = std::max(longest, l.problem_ms + l.nccl_ms + l.setup_ms + l.solve_ms);
  const double scale = longest > 0 ? (L::width - L::left - L::right) / longest : 0;
  const char* names[] = {"problem", "NCCL start", "setup", "solve"};
  std::string s = "<text x=\"" + num(L::left) + "\" y=\"" + num(y0 - 8) + "\" font-size=\"13\">each rank's phases, ms (longest " +
                  num(longest) + ")</text>\n";
  for (size_t i = 0; i < r.ranks.size(); ++i) {
    const RankLine& l = r.ranks[i];
    const double parts[] = {l.problem_ms, l.nccl_ms, l.setup_ms, l.solve_ms};
    const double y = y0 + static_cast<double>(i) * L::rank_bar;
    double x = L::left;
    s += "<text x=\"" + num(L::left - 8) + "\" y=\"" + num(y + 15) + "\" font-size=\"12\" text-anchor=\"end\">rank " +
         std::to_string(l.rank) + "</text>\n";
    for (int p = 0; p < 4; ++p) {
      s += "<rect x=\"" + num(x) + "\" y=\"" + num(y + 2) + "\" width=\"" + num(parts[p] * scale) + "\" height=\"" +
           num(L::rank_bar - 4) + "\" fill=\"" + colour(p) + "\"><title>" + names[p] + " " + num(parts[p]) + " ms</title></rect>\n";
      x += parts[p] * scale;
    }
  }
  const double legend_y = y0 + static_cast<double>(r.ranks.size()) * L::rank_bar + 16;
  for (int p = 0; p < 4; ++p)
    s += "<text x=\"" + num(L::left + 130 * p) + "\" y=\"" + num(legend_y) + "\" font-size=\"12\" fill=\"" + colour(p) + "\">" +
         names[p] + "</text>\n";
  return s;
}

}  // namespace

std::string residual_svg(const SolveReport& r) {
  using L = PlotLayout;
  const auto& hist = r.result.history;
  const int shown = std::min<int>(static_cast<int>(hist.size()), L::max_columns);
  // the axes' ranges: iterations from 0, relative residuals spanning whole decades around the data and the target
  int last = 1;
  double lo = drawable(r.rtol) ? r.rtol : 1e-16, hi = 1;
  for (int j = 0; j < shown; ++j) {
    const double bn = j < static_cast<int>(r.result.columns.size()) && r.result.columns[j].b_norm > 0 ? r.result.columns[j].b_norm : 1;
    for (const auto& [it, rn] : hist[j]) {
      last = std::max(last, it);
      if (const double rel = rn / bn; drawable(rel)) lo = std::min(lo, rel), hi = std::max(hi, rel);
    }
  }
  // whole decades, within what a double can draw (a ratio that underflowed to 0 or overflowed is left out above)
  const int dhi = std::clamp(static_cast<int>(std::ceil(std::log10(hi))), -320, 310);
  const int dlo = std::clamp(static_cast<int>(std::floor(std::log10(lo))), -320, dhi - 1);
  const double pw = L::width - L::left - L::right, ph = L::height - L::top - L::bottom;
  auto px = [&](double it) { return L::left + pw * it / last; };
  auto py = [&](double rel) { return L::top + ph * (dhi - std::log10(rel)) / std::max(1, dhi - dlo); };
  const double total_height = L::height + (r.ranks.empty() ? 0 : 40 + L::rank_bar * static_cast<double>(r.ranks.size()) + 30);
  std::string s = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + num(L::width) +
                  "\" height=\"" + num(total_height) + "\" font-family=\"sans-serif\">\n<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s += "<text x=\"" + num(L::left) + "\" y=\"22\" font-size=\"14\">" + escaped(r.name + ": " + r.solver + ", " + r.precond + ", " + r.backend) +
       "</text>\n";
  for (int d = dlo; d <= dhi; ++d) {  // a grid line per decade
    const double y = py(std::pow(10.0, d));
    s += "<line x1=\"" + num(L::left) + "\" y1=\"" + num(y) + "\" x2=\"" + num(L::width - L::right) + "\" y2=\"" + num(y) +
         "\" stroke=\"#ddd\"/>\n<text x=\"" + num(L::left - 6) + "\" y=\"" + num(y + 4) +
         "\" font-size=\"11\" text-anchor=\"end\">1e" + std::to_string(d) + "</text>\n";
  }
  s += "<text x=\"" + num(L::left + pw / 2) + "\" y=\"" + num(L::height - 12) + "\" font-size=\"12\" text-anchor=\"middle\">iteration (0.." +
       std::to_string(last) + ")</text>\n";
  s += "<text x=\"16\" y=\"" + num(L::top + ph / 2) + "\" font-size=\"12\" transform=\"rotate(-90 16 " + num(L::top + ph / 2) +
       ")\" text-anchor=\"middle\">||r|| / ||b||</text>\n";
  if (r.rtol > 0)
    s += "<line x1=\"" + num(L::left) + "\" y1=\"" + num(py(r.rtol)) + "\" x2=\"" + num(L::width - L::right) + "\" y2=\"" +
         num(py(r.rtol)) + "\" stroke=\"#444\" stroke-dasharray=\"6 4\"><title>rtol " + num(std::log10(r.rtol)) + " decades</title></line>\n";
  for (int j = 0; j < shown; ++j) {
    const double bn = j < static_cast<int>(r.result.columns.size()) && r.result.columns[j].b_norm > 0 ? r.result.columns[j].b_norm : 1;
    std::string points;
    for (const auto& [it, rn] : hist[j])
      if (drawable(rn / bn)) points += num(px(it)) + "," + num(py(rn / bn)) + " ";
    s += "<polyline class=\"column\" fill=\"none\" stroke=\"" + std::string(colour(j)) + "\" stroke-width=\"1.5\" points=\"" + points +
         "\"><title>column " + std::to_string(j) + "</title></polyline>\n";
  }
  if (hist.empty())
    s += "<text x=\"" + num(L::left + 20) + "\" y=\"" + num(L::top + 30) +
         "\" font-size=\"13\">no residual history (the host backend keeps none)</text>\n";
  else if (static_cast<int>(hist.size()) > shown)
    s += "<text x=\"" + num(L::left + 20) + "\" y=\"" + num(L::top + 30) + "\" font-size=\"13\">the first " + std::to_string(shown) +
         " of " + std::to_string(hist.size()) + " columns</text>\n";
  if (!r.ranks.empty()) s += rank_panel(r, L::height + 40);
  return s + "</svg>\n";
}

}  // namespace spcg
