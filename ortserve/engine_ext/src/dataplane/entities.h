// Token classification's entities: per token its logits over the labels, its character span and whether it
// continues the previous token's word -> the entities transformers' TokenClassificationPipeline reports
// (postprocess, gather_pre_entities' output onwards), so both front ends answer an `aggregation` as that pipeline
// does (a token classifier's ENTITIES, EncodeOutputs in wire_encode.cc):
//
//   scores  softmax per token in float (the max subtracted, exp, summed left to right, divided), as its numpy float32
//   none    one entity per token that is not special: its best label (the first of equal scores) and that score
//   simple  those entities grouped: a token joins the group before it when its tag (the label without a "B-"/"I-"
//           prefix) is the group's last one's and it is not "B-"; a group is labelled with its first label after
//           the first '-' (the whole label when it has none), scored with the mean of its scores, spans first start
//           to last end
//   first, average, max  tokens grouped into words first (a token with is_subword joins the word before it), each
//           word labelled by its first token's scores, the mean of its tokens' scores (average) or the token whose
//           best score is highest (max, the first of equal ones), then grouped as `simple`
//   and every entity whose label is in `ignore` ("O") left out.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ortserve {

enum class Aggregation { kNone, kSimple, kFirst, kAverage, kMax };

// The strategies a caller may name, the default (simple) first: the one list the wire rules, their messages and
// ModelMetadata read.
struct AggregationName {
  std::string_view name;
  Aggregation aggregation;
};
inline constexpr AggregationName kAggregations[] = {{"simple", Aggregation::kSimple},
                                                    {"first", Aggregation::kFirst},
                                                    {"average", Aggregation::kAverage},
                                                    {"max", Aggregation::kMax},
                                                    {"none", Aggregation::kNone}};

// One of kAggregations by name; nullopt for anything else.
std::optional<Aggregation> ParseAggregation(std::string_view name);
// "'simple', 'first', 'average', 'max' or 'none'", as messages list the choices.
std::string AggregationChoices();

struct TokenSpan {
  int64_t start = 0, end = 0;  // characters of the caller's text
  bool is_subword = false;     // continues the word of the token before it
  bool special = false;        // [CLS], [SEP], padding: never an entity
};

// A token classifier's call as its tokenizer read it: per text, each token the model read (special ones included,
// in order: row r's values begin with them) and how many characters (code points) of the text it read: its length
// when it read it whole, else where truncation stopped.
struct TokenRows {
  std::vector<std::vector<TokenSpan>> spans;
  std::vector<int64_t> chars_read;
};

struct Entity {
  std::string label;
  float score = 0;
  int64_t start = 0, end = 0;
  int index = -1;  // the token's position (aggregation none); -1 for a group
};

// `logits` is row-major tokens.size() x labels.size().
std::vector<Entity> AggregateEntities(const float* logits, const std::vector<TokenSpan>& tokens,
                                      const std::vector<std::string>& labels, Aggregation aggregation,
                                      const std::vector<std::string>& ignore = {"O"});

}  // namespace ortserve
