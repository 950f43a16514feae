// Token classification's entities (see entities.h).
#include "entities.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <utility>

namespace ortserve {
namespace {

struct Scored {
  std::vector<float> scores;  // softmax over the labels
  int64_t start = 0, end = 0;
  bool is_subword = false;
  int index = -1;
};

// The first index of the largest value (numpy's argmax on finite values).
size_t ArgMax(const std::vector<float>& values) {
  size_t best = 0;
  for (size_t i = 1; i < values.size(); ++i) {
    if (values[i] > values[best]) best = i;
  }
  return best;
}

std::vector<float> Softmax(const float* row, size_t n) {
  float max = row[0];
  for (size_t i = 1; i < n; ++i) max = std::max(max, row[i]);
  std::vector<float> out(n);
  float sum = 0;
  for (size_t i = 0; i < n; ++i) {
    out[i] = std::exp(row[i] - max);
    sum += out[i];
  }
  for (float& v : out) v /= sum;
  return out;
}

std::pair<char, std::string> Tag(const std::string& label) {
  if (label.rfind("B-", 0) == 0) return {'B', label.substr(2)};
  if (label.rfind("I-", 0) == 0) return {'I', label.substr(2)};
  return {'I', label};
}

Entity Word(const std::vector<Scored>& tokens, const std::vector<std::string>& labels, Aggregation aggregation) {
  std::vector<float> scores;
  if (aggregation == Aggregation::kFirst) {
    scores = tokens.front().scores;
  } else if (aggregation == Aggregation::kMax) {
    const Scored* best = &tokens.front();
    float best_max = *std::max_element(best->scores.begin(), best->scores.end());
    for (const Scored& token : tokens) {
      const float m = *std::max_element(token.scores.begin(), token.scores.end());
      if (m > best_max) best = &token, best_max = m;
    }
    scores = best->scores;
  } else {  // average
    scores.assign(labels.size(), 0.0f);
    for (const Scored& token : tokens) {
      for (size_t i = 0; i < scores.size(); ++i) scores[i] += token.scores[i];
    }
    for (float& v : scores) v /= static_cast<float>(tokens.size());
  }
  const size_t best = ArgMax(scores);
  return Entity{labels[best], scores[best], tokens.front().start, tokens.back().end, -1};
}

Entity Group(const std::vector<Entity>& members) {
  const std::string& first = members.front().label;
  const size_t dash = first.find('-');
  float sum = 0;
  for (const Entity& e : members) sum += e.score;
  return Entity{dash == std::string::npos ? first : first.substr(dash + 1),
                sum / static_cast<float>(members.size()), members.front().start, members.back().end, -1};
}

}  // namespace

std::optional<Aggregation> ParseAggregation(std::string_view name) {
  for (const AggregationName& known : kAggregations) {
    if (known.name == name) return known.aggregation;
  }
  return std::nullopt;
}

std::string AggregationChoices() {
  const size_t count = std::size(kAggregations);
  std::string out;
  for (size_t i = 0; i < count; ++i) {
    out += (i == 0 ? "'" : i + 1 == count ? " or '" : ", '") + std::string(kAggregations[i].name) + "'";
  }
  return out;
}

std::vector<Entity> AggregateEntities(const float* logits, const std::vector<TokenSpan>& tokens,
                                      const std::vector<std::string>& labels, Aggregation aggregation,
                                      const std::vector<std::string>& ignore) {
  const size_t width = labels.size();
  std::vector<Scored> pre;
  for (size_t t = 0; t < tokens.size(); ++t) {
    if (tokens[t].special || width == 0) continue;
    pre.push_back(Scored{Softmax(logits + t * width, width), tokens[t].start, tokens[t].end, tokens[t].is_subword,
                         static_cast<int>(t)});
  }
  std::vector<Entity> entities;
  if (aggregation == Aggregation::kNone || aggregation == Aggregation::kSimple) {
    for (const Scored& token : pre) {
      const size_t best = ArgMax(token.scores);
      entities.push_back(Entity{labels[best], token.scores[best], token.start, token.end, token.index});
    }
  } else {
    std::vector<Scored> word;
    for (Scored& token : pre) {
      if (!word.empty() && !token.is_subword) {
        entities.push_back(Word(word, labels, aggregation));
        word.clear();
      }
      word.push_back(std::move(token));
    }
    if (!word.empty()) entities.push_back(Word(word, labels, aggregation));
  }
  if (aggregation != Aggregation::kNone) {
    std::vector<Entity> groups, members;
    for (Entity& entity : entities) {
      if (!members.empty()) {
        const auto [bi, tag] = Tag(entity.label);
        const auto [last_bi, last_tag] = Tag(members.back().label);
        (void)last_bi;
        if (!(tag == last_tag && bi != 'B')) {
          groups.push_back(Group(members));
          members.clear();
        }
      }
      members.push_back(std::move(entity));
    }
    if (!members.empty()) groups.push_back(Group(members));
    entities = std::move(groups);
  }
  entities.erase(std::remove_if(entities.begin(), entities.end(),
                                [&ignore](const Entity& e) {
                                  return std::find(ignore.begin(), ignore.end(), e.label) != ignore.end();
                                }),
                 entities.end());
  return entities;
}

}  // namespace ortserve
