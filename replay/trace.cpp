// Serving traces: JSON Lines parsing with line-and-field errors, checks against a config, and the
// synthetic trace generator.
#include "replay/trace.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "equivalence/oracle.h"
#include "warmup/error.h"

namespace warmkey::replay {
namespace {

using nlohmann::json;

constexpr std::int64_t kMaxTraceInt = std::numeric_limits<std::int32_t>::max();
constexpr std::string_view kEventRebalance = "rebalance";

const std::vector<std::string> kBatchFields = {"step",         "kind",         "num_tokens", "padded_tokens",
                                               "image_tokens", "eplb_version", "ep_rank",    "token_offset"};
const std::vector<std::string> kRebalanceFields = {"event", "step", "eplb_version"};

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + s;
  return out;
}

// Where an item sits: "trace 'f.jsonl' line 7" or "trace '<synthetic>' item 7".
std::string where(const std::string& source, std::size_t line, std::size_t index) {
  return line > 0 ? str_cat("trace '", source, "' line ", line) : str_cat("trace '", source, "' item ", index + 1);
}

// Reads one line's fields; every error names the line and the field.
class LineReader {
 public:
  LineReader(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  template <class... Parts>
  [[noreturn]] void fail(std::string_view field, const Parts&... detail) const {
    throw InputError(str_cat(where_, ": field '", field, "': ", detail...));
  }

  void only(const std::vector<std::string>& known, std::string_view what) const {
    for (auto it = j_.begin(); it != j_.end(); ++it) {
      if (std::find(known.begin(), known.end(), it.key()) == known.end())
        fail(it.key(), "unknown field of ", what, " (known fields: ", join(known), ")");
    }
  }

  // A non-negative integer below 2^31; `fallback` when absent and not required.
  std::int64_t integer(const std::string& field, bool required, std::int64_t fallback = 0) const {
    auto it = j_.find(field);
    if (it == j_.end()) {
      if (required) fail(field, "missing (required)");
      return fallback;
    }
    if (!it->is_number_integer()) fail(field, "expected a non-negative integer, got ", it->dump());
    if (it->is_number_unsigned() ? it->get<std::uint64_t>() > static_cast<std::uint64_t>(kMaxTraceInt)
                                 : it->get<std::int64_t>() > kMaxTraceInt)
      fail(field, it->dump(), " exceeds 2^31 - 1");
    const std::int64_t v = it->get<std::int64_t>();
    if (v < 0) fail(field, v, " is negative");
    return v;
  }

  std::string string(const std::string& field) const {
    auto it = j_.find(field);
    if (it == j_.end()) fail(field, "missing (required)");
    if (!it->is_string()) fail(field, "expected a string, got ", it->dump());
    return it->get<std::string>();
  }

 private:
  const json& j_;
  std::string where_;
};

TraceItem parse_line(const json& j, const std::string& at, std::size_t line) {
  if (!j.is_object()) throw InputError(str_cat(at, ": expected a JSON object, got ", j.dump()));
  LineReader r(j, at);
  if (j.contains("event")) {
    const std::string event = r.string("event");
    if (event != kEventRebalance) r.fail("event", "\"", event, "\" is not an event (known: rebalance)");
    r.only(kRebalanceFields, "a rebalance event");
    RebalanceEvent e;
    e.step = r.integer("step", true);
    e.eplb_version = r.integer("eplb_version", true);
    e.line = line;
    return e;
  }
  r.only(kBatchFields, "a batch");
  ServingBatch b;
  b.step = r.integer("step", true);
  const std::string kind = r.string("kind");
  if (kind == "decode") {
    b.kind = BatchKind::decode;
  } else if (kind == "prefill") {
    b.kind = BatchKind::prefill;
  } else {
    r.fail("kind", "\"", kind, "\" is not one of decode, prefill");
  }
  b.num_tokens = r.integer("num_tokens", true);
  b.padded_tokens = r.integer("padded_tokens", false);
  b.image_tokens = r.integer("image_tokens", false);
  b.eplb_version = r.integer("eplb_version", false);
  b.ep_rank = r.integer("ep_rank", false);
  b.token_offset = r.integer("token_offset", false);
  b.line = line;
  return b;
}

// Throws InputError "<where>: field '<field>': <detail>".
template <class... Parts>
[[noreturn]] void fail_at(const std::string& at, std::string_view field, const Parts&... detail) {
  throw InputError(str_cat(at, ": field '", field, "': ", detail...));
}

void validate_batch(const ServingBatch& b, const ModelConfig& c, const std::string& at, std::int64_t version) {
  const std::string of = str_cat(" of config '", c.name, "'");
  if (b.kind == BatchKind::decode && b.num_tokens > c.max_num_seqs)
    fail_at(at, "num_tokens", b.num_tokens, " exceeds max_num_seqs ", c.max_num_seqs, of,
            " (a decode step runs one token per sequence)");
  if (b.num_tokens > c.max_num_batched_tokens)
    fail_at(at, "num_tokens", b.num_tokens, " exceeds max_num_batched_tokens ", c.max_num_batched_tokens, of);
  if (b.padded_tokens > 0 && b.padded_tokens < b.num_tokens)
    fail_at(at, "padded_tokens", b.padded_tokens, " is below num_tokens ", b.num_tokens,
            " (padding adds rows; 0 means not padded)");
  if (b.padded_tokens > c.max_num_batched_tokens)
    fail_at(at, "padded_tokens", b.padded_tokens, " exceeds max_num_batched_tokens ", c.max_num_batched_tokens, of);
  if (b.image_tokens > b.num_tokens) fail_at(at, "image_tokens", b.image_tokens, " exceeds num_tokens ", b.num_tokens);
  if (b.image_tokens > 0 && !c.vision)
    fail_at(at, "image_tokens", b.image_tokens, " image tokens, but config '", c.name, "' has vision off");
  if (b.ep_rank >= c.ep_size) fail_at(at, "ep_rank", "rank ", b.ep_rank, " is not below ep_size ", c.ep_size, of);
  if (b.eplb_version != version) {
    if (!c.eplb) fail_at(at, "eplb_version", b.eplb_version, " must be 0: config '", c.name, "' has EPLB off");
    fail_at(at, "eplb_version", b.eplb_version, " is not the replica map in force (", version,
            ", set by the latest rebalance event before this line)");
  }
  if (b.token_offset + b.rows() > c.max_num_batched_tokens)
    fail_at(at, "token_offset", "rows [", b.token_offset, ", ", b.token_offset + b.rows(),
            ") do not fit the engine's buffers of max_num_batched_tokens ", c.max_num_batched_tokens, of);
}

// ---- the synthetic trace ---------------------------------------------------------------------

// What one rank is prefilling: the tokens and image tokens of its current prompt still to run.
struct PromptState {
  std::int64_t remaining = 0;
  std::int64_t images = 0;
};

class SyntheticTrace {
 public:
  SyntheticTrace(const ModelConfig& c, const SyntheticTraceOptions& o)
      : c_(c),
        o_(o),
        rng_(o.seed ^ 0x5e27d1a6b3c4f809ULL),
        sizes_(cuda_graph_sizes(c)),
        prompts_(static_cast<std::size_t>(c.ep_size)) {}

  Trace make() {
    Trace t;
    t.source = str_cat("synthetic trace of config '", c_.name, "' (seed ", o_.seed, ", ", o_.steps, " steps)");
    const std::int64_t rebalance_every = std::max<std::int64_t>(2, o_.steps / 4);
    for (std::int64_t s = 0; s < o_.steps; ++s) {
      if (c_.eplb && s > 0 && s % rebalance_every == 0) t.items.push_back(RebalanceEvent{s, ++version_, 0});
      for (std::int64_t rank = 0; rank < c_.ep_size; ++rank) step(t, s, rank);
    }
    return t;
  }

 private:
  void step(Trace& t, std::int64_t s, std::int64_t rank) {
    // The first steps of rank 0 pin the extremes: 1 token, max_num_seqs tokens, a full chunk.
    const bool prefill = rank == 0 && s < 3 ? s == 2 : (s + rank) % 3 == 2;
    if (!prefill) {
      std::int64_t n = rng_.uniform_int(1, c_.max_num_seqs);
      if (rank == 0 && s == 0) n = 1;
      if (rank == 0 && s == 1) n = c_.max_num_seqs;
      ServingBatch b = batch(s, rank, BatchKind::decode, n);
      b.padded_tokens = *std::lower_bound(sizes_.begin(), sizes_.end(), n);
      t.items.push_back(b);
      return;
    }
    PromptState& p = prompts_[static_cast<std::size_t>(rank)];
    const std::int64_t max_b = c_.max_num_batched_tokens;
    if (p.remaining == 0) new_prompt(p, rank == 0 && s == 2);
    const std::int64_t chunk = std::min(p.remaining, max_b);
    const std::int64_t images = std::min(p.images, chunk);
    p.remaining -= chunk;
    p.images -= images;
    // A chunk that leaves room shares its step with running decodes (chunked prefill).
    const std::int64_t room = std::min(c_.max_num_seqs, max_b - chunk);
    const std::int64_t decodes = room > 0 && rng_.bernoulli(0.5) ? rng_.uniform_int(1, room) : 0;
    const std::int64_t n = chunk + decodes;
    // Every third prefill runs as two micro-batches (two-batch overlap); the second starts at an
    // odd token offset, so its per-token views (K ids a row) may start off a 16-byte boundary.
    if (++prefills_ % 3 == 0 && n >= 3) {
      std::int64_t first = (n / 2) | 1;
      if (first >= n) first = n - 2;
      ServingBatch a = batch(s, rank, BatchKind::prefill, first);
      a.image_tokens = std::min(images, first);
      ServingBatch b = batch(s, rank, BatchKind::prefill, n - first);
      b.image_tokens = images - a.image_tokens;
      b.token_offset = first;
      t.items.push_back(a);
      t.items.push_back(b);
      return;
    }
    ServingBatch b = batch(s, rank, BatchKind::prefill, n);
    b.image_tokens = images;
    t.items.push_back(b);
  }

  // A prompt of 1 .. max_num_batched_tokens tokens, or a long one that is chunked; every second
  // prompt is an image request when vision is on.
  void new_prompt(PromptState& p, bool first_full_chunk) {
    const std::int64_t max_b = c_.max_num_batched_tokens;
    if (first_full_chunk) {
      p.remaining = max_b + std::max<std::int64_t>(1, max_b / 3);
    } else if (rng_.bernoulli(0.3)) {
      p.remaining = rng_.uniform_int(max_b + 1, 3 * max_b);
    } else {
      p.remaining = rng_.uniform_int(1, max_b);
    }
    p.images = 0;
    if (c_.vision && prompts_started_++ % 2 == 0)
      p.images = rng_.uniform_int(1, std::max<std::int64_t>(1, std::min(p.remaining, max_b) / 2));
  }

  ServingBatch batch(std::int64_t s, std::int64_t rank, BatchKind kind, std::int64_t n) const {
    ServingBatch b;
    b.step = s;
    b.kind = kind;
    b.num_tokens = n;
    b.eplb_version = version_;
    b.ep_rank = rank;
    return b;
  }

  const ModelConfig& c_;
  const SyntheticTraceOptions& o_;
  spaces::CaseRng rng_;
  std::vector<std::int64_t> sizes_;
  std::vector<PromptState> prompts_;
  std::int64_t version_ = 0;
  std::int64_t prefills_ = 0;
  std::int64_t prompts_started_ = 0;
};

}  // namespace

std::string RebalanceEvent::to_string() const {
  return str_cat("step ", step, " EPLB rebalance to v", eplb_version, line ? str_cat(" [line ", line, "]") : "");
}

nlohmann::json RebalanceEvent::to_json() const {
  return {{"event", std::string(kEventRebalance)}, {"step", step}, {"eplb_version", eplb_version}};
}

std::size_t Trace::batches() const {
  return static_cast<std::size_t>(std::count_if(
      items.begin(), items.end(), [](const TraceItem& i) { return std::holds_alternative<ServingBatch>(i); }));
}

std::size_t Trace::rebalances() const { return items.size() - batches(); }

std::string Trace::to_jsonl() const {
  std::string out;
  for (const TraceItem& item : items) {
    out += std::visit([](const auto& x) { return x.to_json().dump(); }, item);
    out += '\n';
  }
  return out;
}

Trace parse_trace(std::string_view text, const std::string& source) {
  Trace t;
  t.source = source;
  std::size_t line = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    if (l.find_first_not_of(" \t\r") == std::string_view::npos) continue;
    const std::string at = where(source, line, 0);
    json j;
    try {
      j = json::parse(l);
    } catch (const json::parse_error& e) {
      throw InputError(str_cat(at, ": invalid JSON: ", e.what()));
    }
    t.items.push_back(parse_line(j, at, line));
  }
  if (t.items.empty()) throw InputError(str_cat("trace '", source, "': no batches (the file is empty)"));
  return t;
}

Trace load_trace(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec))
    throw InputError(str_cat("trace '", file.string(), "': not an existing file"));
  std::ifstream in(file, std::ios::binary);
  if (!in) throw InputError(str_cat("trace '", file.string(), "': cannot be read"));
  std::ostringstream ss;
  ss << in.rdbuf();
  return parse_trace(ss.str(), file.string());
}

void validate_trace(const Trace& trace, const ModelConfig& config) {
  std::int64_t version = 0, last_step = 0;
  for (std::size_t i = 0; i < trace.items.size(); ++i) {
    const TraceItem& item = trace.items[i];
    const std::size_t line = std::visit([](const auto& x) { return x.line; }, item);
    const std::int64_t step = std::visit([](const auto& x) { return x.step; }, item);
    const std::string at = where(trace.source, line, i);
    if (step < last_step)
      fail_at(at, "step", step, " goes back in time (the previous item is at step ", last_step, ")");
    last_step = step;
    if (const auto* e = std::get_if<RebalanceEvent>(&item)) {
      if (!config.eplb) fail_at(at, "event", "an EPLB rebalance, but config '", config.name, "' has EPLB off");
      if (e->eplb_version <= version)
        fail_at(at, "eplb_version", e->eplb_version, " does not move past the map in force (", version, ")");
      version = e->eplb_version;
      continue;
    }
    validate_batch(std::get<ServingBatch>(item), config, at, version);
  }
}

std::vector<std::int64_t> cuda_graph_sizes(const ModelConfig& config) {
  std::vector<std::int64_t> out;
  for (std::int64_t s : {1, 2, 4}) {
    if (s < config.max_num_seqs) out.push_back(s);
  }
  for (std::int64_t s = 8; s < config.max_num_seqs; s += 8) out.push_back(s);
  out.push_back(config.max_num_seqs);
  return out;
}

Trace synthetic_trace(const ModelConfig& config, const SyntheticTraceOptions& options) {
  config.validate();
  if (options.steps < 1) throw InputError(str_cat("synthetic trace: steps ", options.steps, " must be positive"));
  return SyntheticTrace(config, options).make();
}

}  // namespace warmkey::replay
