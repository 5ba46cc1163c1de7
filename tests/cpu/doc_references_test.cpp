// Every reference to a document resolves inside the repository, so a reader of the repository alone
// can follow it. Read from the source tree (WARMKEY_SOURCE_DIR, set by ctest):
//   - relative Markdown links `[text](path#anchor)` in every *.md file: the path exists, relative to
//     the document's folder;
//   - every Markdown file named anywhere (code comments, scripts, docs): `docs/USER_GUIDE.md`,
//     `history/PERFORMANCE-2026-11-29-to-12-01.md` or a bare `KERNELS.md` exists relative to the repository root,
//     the naming file's folder or docs/;
//   - every section of the performance docs cited by name (`docs/PERFORMANCE.md, "Key-level
//     folding"`) begins a heading of docs/PERFORMANCE.md or of a history file in docs/history/, or
//     is listed in PERFORMANCE.md's table "Sections cited by name elsewhere".
// URLs, wildcards (`PERFORMANCE-*.md`) and placeholders (`<stem>.md`) are not references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "tests/support/source_tree.h"

// NOTES: the helpers sit in a namespace named after this file: the test binaries are unity builds,
// where two files' anonymous namespaces share one translation unit.
namespace warmkey::test::doc_references {
namespace doc_references_test {

namespace fs = std::filesystem;

struct TextFile {
  std::string rel;  // '/'-separated, relative to the root
  std::string text;
};

// Every text file of the tree: no build folders, no hidden ones but the CI's (.ci, .github,
// .clusterfuzzlite), no fuzz inputs, nothing binary.
std::vector<TextFile> text_files(const fs::path& root) {
  std::vector<TextFile> out;
  for (auto it = fs::recursive_directory_iterator(root); it != fs::recursive_directory_iterator(); ++it) {
    const std::string name = it->path().filename().string();
    if (it->is_directory()) {
      const bool hidden = name.starts_with('.') && name != ".ci" && name != ".github" && name != ".clusterfuzzlite";
      if (hidden || name.starts_with("build") || name == "corpus" || name == "corpora" || name == "regressions")
        it.disable_recursion_pending();
      continue;
    }
    if (!it->is_regular_file() || it->file_size() > (2u << 20)) continue;
    std::ifstream in(it->path(), std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    std::string text = s.str();
    if (text.find('\0') != std::string::npos) continue;
    out.push_back({fs::relative(it->path(), root).generic_string(), std::move(text)});
  }
  return out;
}

bool is_path_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_' || c == '-' || c == '.' || c == '/';
}

std::string folder_of(const std::string& rel) {
  const std::size_t slash = rel.rfind('/');
  return slash == std::string::npos ? std::string() : rel.substr(0, slash + 1);
}

// A reference made in `from` (a file relative to root) to `target` resolves.
bool resolves(const fs::path& root, const std::string& from, std::string target) {
  while (target.starts_with("./")) target.erase(0, 2);
  const std::string dir = folder_of(from);
  return fs::exists(root / (dir + target)) || fs::exists(root / target) || fs::exists(root / "docs" / target);
}

std::string where(const TextFile& f, std::size_t at) {
  return f.rel + ":" + std::to_string(1 + std::count(f.text.begin(), f.text.begin() + static_cast<long>(at), '\n'));
}

// The Markdown files a text names: each maximal run of path characters ending in ".md" at an
// identifier boundary, minus URLs and wildcards.
std::vector<std::pair<std::size_t, std::string>> named_markdown_files(const std::string& text) {
  std::vector<std::pair<std::size_t, std::string>> out;
  for (std::size_t at = text.find(".md"); at != std::string::npos; at = text.find(".md", at + 1)) {
    const std::size_t end = at + 3;
    if (end < text.size() && (std::isalnum(static_cast<unsigned char>(text[end])) != 0 || text[end] == '_')) continue;
    std::size_t begin = at;
    while (begin > 0 && is_path_char(text[begin - 1])) --begin;
    std::string token = text.substr(begin, end - begin);
    while (token.starts_with('.') && !token.starts_with("./") && !token.starts_with("../")) token.erase(0, 1);
    if (token.size() <= 3 || token.starts_with('/')) continue;  // ".md" alone (an extension), absolute paths
    const bool url = begin > 0 && text[begin - 1] == ':';
    const bool wildcard = begin > 0 && (text[begin - 1] == '*' || text[begin - 1] == '>');
    if (url || wildcard || token.find("//") != std::string::npos) continue;
    out.emplace_back(begin, token);
  }
  return out;
}

// The relative link targets of a Markdown text: `](target)`, without its anchor.
std::vector<std::pair<std::size_t, std::string>> markdown_links(const std::string& text) {
  std::vector<std::pair<std::size_t, std::string>> out;
  for (std::size_t at = text.find("]("); at != std::string::npos; at = text.find("](", at + 1)) {
    const std::size_t close = text.find(')', at);
    if (close == std::string::npos) break;
    std::string target = text.substr(at + 2, close - at - 2);
    if (target.empty() || target.find_first_of(" \n\"") != std::string::npos || target.starts_with('#') ||
        target.find("://") != std::string::npos || target.starts_with("mailto:"))
      continue;
    target = target.substr(0, target.find('#'));
    out.emplace_back(at, target);
  }
  return out;
}

// The text with line breaks inside comments and paragraphs joined: a newline, the next line's
// indentation and comment marker (//, #, *) become one space, so a citation wrapped over two
// comment lines reads as one.
std::string joined_lines(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\n') {
      out += text[i];
      continue;
    }
    std::size_t j = i + 1;
    while (j < text.size() && (text[j] == ' ' || text[j] == '\t')) ++j;
    if (text.compare(j, 2, "//") == 0)
      j += 2;
    else if (j < text.size() && (text[j] == '#' || text[j] == '*'))
      ++j;
    while (j < text.size() && (text[j] == ' ' || text[j] == '\t')) ++j;
    out += ' ';
    i = j - 1;
  }
  return out;
}

// Section names cited by name: the file name, a comma, colon or space, an optional `section `, and
// the name in double quotes (docs/PERFORMANCE.md, section "Fuzzing throughput").
std::vector<std::string> cited_sections(const std::string& text) {
  std::vector<std::string> out;
  const std::string j = joined_lines(text);
  for (std::size_t at = j.find("PERFORMANCE.md"); at != std::string::npos; at = j.find("PERFORMANCE.md", at + 1)) {
    std::size_t q = at + 14;
    while (q < j.size() && (j[q] == ',' || j[q] == ' ' || j[q] == ':')) ++q;
    if (q == at + 14) continue;  // the name in code, as in "PERFORMANCE.md"
    if (j.compare(q, 8, "section ") == 0) q += 8;
    if (q >= j.size() || j[q] != '"') continue;
    const std::size_t close = j.find('"', q + 1);
    if (close == std::string::npos || close - q > 120) continue;
    out.push_back(j.substr(q + 1, close - q - 1));
  }
  return out;
}

// The heading texts (without the #s) of a Markdown text.
std::vector<std::string> headings(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with('#')) continue;
    const std::size_t start = line.find_first_not_of('#');
    if (start == std::string::npos || line[start] != ' ') continue;
    out.push_back(line.substr(start + 1));
  }
  return out;
}

// The names in the first column of PERFORMANCE.md's table "Sections cited by name elsewhere".
std::set<std::string> listed_citations(const std::string& performance) {
  std::set<std::string> out;
  const std::size_t section = performance.find("## Sections cited by name elsewhere");
  if (section == std::string::npos) return out;
  const std::size_t next = performance.find("\n## ", section + 1);
  std::istringstream in(performance.substr(section, next == std::string::npos ? std::string::npos : next - section));
  for (std::string line; std::getline(in, line);) {
    if (!line.starts_with("| ")) continue;
    const std::string first = line.substr(2, line.find(" |", 2) - 2);
    for (std::size_t q = first.find('"'); q != std::string::npos; q = first.find('"', q + 1)) {
      const std::size_t close = first.find('"', q + 1);
      if (close == std::string::npos) break;
      out.insert(first.substr(q + 1, close - q - 1));
      q = close;
    }
  }
  return out;
}

class DocReferences : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ = source_dir();
    files_ = text_files(root_);
  }
  static inline fs::path root_;
  static inline std::vector<TextFile> files_;
};

TEST_F(DocReferences, everyRelativeMarkdownLinkResolves) {
  ASSERT_TRUE(fs::exists(root_ / "docs" / "DESIGN.md")) << root_ << " is not the source tree";
  std::size_t links = 0;
  for (const TextFile& f : files_) {
    if (!f.rel.ends_with(".md")) continue;
    for (const auto& [at, target] : markdown_links(f.text)) {
      ++links;
      EXPECT_TRUE(fs::exists(root_ / (folder_of(f.rel) + target)))
          << where(f, at) << ": the link target '" << target << "' does not exist";
    }
  }
  EXPECT_GT(links, 0u) << "no relative Markdown link found: the scan is broken";
}

TEST_F(DocReferences, everyMarkdownFileNamedInTheTreeExists) {
  ASSERT_TRUE(fs::exists(root_ / "docs" / "DESIGN.md")) << root_ << " is not the source tree";
  std::set<std::string> seen;
  for (const TextFile& f : files_) {
    for (const auto& [at, token] : named_markdown_files(f.text)) {
      seen.insert(token);
      EXPECT_TRUE(resolves(root_, f.rel, token))
          << where(f, at) << ": '" << token << "' is not a file of the repository (looked in "
          << (folder_of(f.rel).empty() ? "" : folder_of(f.rel) + ", ") << "the root and docs/)";
    }
  }
  // The scan must see the references this check exists for.
  for (const char* name : {"docs/DESIGN.md", "docs/STYLE.md", "KERNELS.md", "docs/PERFORMANCE.md"})
    EXPECT_TRUE(seen.contains(name)) << "the scan found no reference to " << name;
}

TEST_F(DocReferences, everyPerformanceSectionCitedByNameIsFound) {
  const auto performance =
      std::find_if(files_.begin(), files_.end(), [](const TextFile& f) { return f.rel == "docs/PERFORMANCE.md"; });
  ASSERT_NE(performance, files_.end()) << "docs/PERFORMANCE.md is missing";
  std::vector<std::string> known = headings(performance->text);
  for (const TextFile& f : files_) {
    if (f.rel.starts_with("docs/history/PERFORMANCE")) {
      const std::vector<std::string> h = headings(f.text);
      known.insert(known.end(), h.begin(), h.end());
    }
  }
  const std::set<std::string> listed = listed_citations(performance->text);
  EXPECT_FALSE(listed.empty()) << "PERFORMANCE.md has no table \"Sections cited by name elsewhere\"";
  std::size_t citations = 0;
  for (const TextFile& f : files_) {
    for (const std::string& name : cited_sections(f.text)) {
      ++citations;
      const bool heading =
          std::any_of(known.begin(), known.end(), [&](const std::string& h) { return h.starts_with(name); });
      EXPECT_TRUE(heading || listed.contains(name))
          << f.rel << " cites the section \"" << name
          << "\" of docs/PERFORMANCE.md: no heading of PERFORMANCE.md or docs/history/PERFORMANCE-*.md begins "
             "with it, and the table \"Sections cited by name elsewhere\" does not list it";
    }
  }
  EXPECT_GT(citations, 0u) << "no section citation found: the scan is broken";
}

}  // namespace doc_references_test
}  // namespace warmkey::test::doc_references
