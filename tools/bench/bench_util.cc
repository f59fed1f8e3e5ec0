#include "tools/bench/bench_util.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <random>

#include "absl/strings/str_cat.h"
#include "agent/base/json_text.h"
#include "fmt/format.h"
#include "nlohmann/json.hpp"

namespace fabric::bench {

HttpResponse LocalGet(int port, const std::string& path, absl::Duration timeout) {
  auto r = HttpGet(absl::StrCat("127.0.0.1:", port), path, timeout);
  return r.ok() ? *std::move(r) : HttpResponse{};
}

double Samples::Percentile(double q) const {
  std::vector<double> sorted = values_;
  std::sort(sorted.begin(), sorted.end());
  // Nearest rank: the smallest value with at least q of the samples at or below it.
  size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size())));
  if (rank > 0) --rank;
  return sorted[std::min(rank, sorted.size() - 1)];
}

double Samples::Mean() const {
  return std::accumulate(values_.begin(), values_.end(), 0.0) / static_cast<double>(values_.size());
}

namespace {

std::string Num(double v) {
  const double a = std::fabs(v);
  if (a >= 1000) return fmt::format("{:.0f}", v);
  if (a >= 100) return fmt::format("{:.1f}", v);
  if (a >= 1) return fmt::format("{:.2f}", v);
  return fmt::format("{:.3f}", v);
}

std::string WithUnit(double v, const std::string& unit) {
  if (unit == "x") return Num(v) + "x";
  if (unit == "count") return Num(v);
  return Num(v) + " " + unit;
}

}  // namespace

void PrintTable(const std::vector<Row>& rows) {
  std::vector<std::vector<std::string>> cells;
  cells.push_back(
      {"case", "metric", "value", "baseline (same run)", "ratio", "target", "verdict", "note"});
  for (const Row& r : rows) {
    std::string value = r.value ? WithUnit(*r.value, r.unit) : "not measured: " + r.note;
    std::string base;
    if (r.baseline) base = WithUnit(*r.baseline, r.unit) + " " + r.baseline_name;
    std::string ratio = r.ratio ? Num(*r.ratio) + "x" : "";
    cells.push_back(
        {r.case_name, r.metric, value, base, ratio, r.target, r.verdict, r.value ? r.note : ""});
  }
  std::vector<size_t> width(cells[0].size(), 0);
  for (const auto& line : cells) {
    for (size_t i = 0; i < line.size(); ++i) width[i] = std::max(width[i], line[i].size());
  }
  for (size_t n = 0; n < cells.size(); ++n) {
    std::string out;
    for (size_t i = 0; i < cells[n].size(); ++i) {
      out += fmt::format("{:<{}}", cells[n][i], width[i]);
      if (i + 1 < cells[n].size()) out += " | ";
    }
    while (!out.empty() && out.back() == ' ') out.pop_back();
    std::printf("%s\n", out.c_str());
    if (n == 0) {
      std::string rule;
      for (size_t i = 0; i < width.size(); ++i) {
        rule += std::string(width[i], '-');
        if (i + 1 < width.size()) rule += "-|-";
      }
      std::printf("%s\n", rule.c_str());
    }
  }
  std::fflush(stdout);
}

bool WriteJson(const std::vector<Row>& rows, const std::string& path) {
  nlohmann::json out = nlohmann::json::array();
  for (const Row& r : rows) {
    nlohmann::json j = {{"case", r.case_name},
                        {"metric", r.metric},
                        {"unit", r.unit},
                        {"target", r.target},
                        {"verdict", r.verdict},
                        {"note", r.note},
                        {"baseline_name", r.baseline_name}};
    j["value"] = r.value ? nlohmann::json(*r.value) : nlohmann::json(nullptr);
    j["baseline"] = r.baseline ? nlohmann::json(*r.baseline) : nlohmann::json(nullptr);
    j["ratio"] = r.ratio ? nlohmann::json(*r.ratio) : nlohmann::json(nullptr);
    out.push_back(j);
  }
  std::ofstream f(path);
  f << DumpJson(out, 1) << "\n";
  return static_cast<bool>(f);
}

std::string Verdict(bool met) { return met ? "met" : "MISSED"; }

TempDir::TempDir(const std::string& prefix) {
  std::string tmpl = "/tmp/" + prefix + "-XXXXXX";
  if (mkdtemp(tmpl.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

StderrToFile::StderrToFile(const std::string& file) {
  std::fflush(stderr);
  int fd = open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  saved_ = dup(2);
  dup2(fd, 2);
  close(fd);
}

StderrToFile::~StderrToFile() {
  if (saved_ < 0) return;
  std::fflush(stderr);
  dup2(saved_, 2);
  close(saved_);
}

double RandomMillis(double max_ms) {
  static thread_local std::mt19937_64 rng(std::random_device{}());
  return std::uniform_real_distribution<double>(0.0, max_ms)(rng);
}

double ThreadCpuMillis() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

}  // namespace fabric::bench
