#include "structured/after_reasoning.h"

#include <algorithm>
#include <utility>

namespace latent::structured {
namespace {

class AfterReasoningConstraint final : public engine::TokenConstraint {
 public:
  AfterReasoningConstraint(std::unique_ptr<engine::TokenConstraint> grammar, int32_t end_token,
                           int64_t vocab_size, int32_t open_token)
      : grammar_(std::move(grammar)),
        end_token_(end_token),
        open_token_(open_token),
        vocab_size_(vocab_size),
        phase_(open_token >= 0 ? Phase::kFirst : Phase::kReasoning) {}

  void FillNextTokenBitmask(uint32_t* bitmask) override {
    switch (phase_) {
      case Phase::kFirst:
        // The answer's first token, or the open token that makes it the reasoning's.
        grammar_->FillNextTokenBitmask(bitmask);
        // An id past the mask is one the model cannot draw anyway.
        if (open_token_ < vocab_size_) bitmask[open_token_ >> 5] |= 1u << (open_token_ & 31);
        return;
      case Phase::kReasoning:
        // Every token of the vocabulary, as an unconstrained draw has: the reasoning is free
        // text, and EOS there ends the sample as it would without a grammar.
        std::fill_n(bitmask, engine::BitmaskWords(vocab_size_), ~0u);
        return;
      case Phase::kAnswer:
        grammar_->FillNextTokenBitmask(bitmask);
        return;
    }
  }

  bool Accept(int32_t token) override {
    switch (phase_) {
      case Phase::kFirst:
        if (token == open_token_) {
          phase_ = Phase::kReasoning;
          return true;
        }
        // Refused, the state stays as it was (still the first token).
        if (!grammar_->Accept(token)) return false;
        phase_ = Phase::kAnswer;
        return true;
      case Phase::kReasoning:
        // The end token itself is the reasoning's, not the answer's: the grammar starts after it.
        if (token == end_token_) phase_ = Phase::kAnswer;
        return true;
      case Phase::kAnswer:
        return grammar_->Accept(token);
    }
    return false;
  }

  bool IsTerminated() const override {
    return phase_ == Phase::kAnswer && grammar_->IsTerminated();
  }

 private:
  // kFirst: nothing generated yet and the model may open the reasoning; kReasoning: inside it;
  // kAnswer: the grammar's.
  enum class Phase { kFirst, kReasoning, kAnswer };
  std::unique_ptr<engine::TokenConstraint> grammar_;
  int32_t end_token_;
  int32_t open_token_;
  int64_t vocab_size_;
  Phase phase_;
};

class AfterReasoningFactory final : public engine::TokenConstraintFactory {
 public:
  AfterReasoningFactory(std::shared_ptr<const engine::TokenConstraintFactory> grammar,
                        int32_t end_token, int64_t vocab_size, int32_t open_token)
      : grammar_(std::move(grammar)),
        end_token_(end_token),
        open_token_(open_token),
        vocab_size_(vocab_size) {}

  std::unique_ptr<engine::TokenConstraint> Start() const override {
    return std::make_unique<AfterReasoningConstraint>(grammar_->Start(), end_token_, vocab_size_,
                                                      open_token_);
  }

 private:
  std::shared_ptr<const engine::TokenConstraintFactory> grammar_;
  int32_t end_token_;
  int32_t open_token_;
  int64_t vocab_size_;
};

}  // namespace

std::shared_ptr<const engine::TokenConstraintFactory> AfterReasoning(
    std::shared_ptr<const engine::TokenConstraintFactory> grammar, int32_t end_token,
    int64_t vocab_size, int32_t open_token) {
  return std::make_shared<AfterReasoningFactory>(std::move(grammar), end_token, vocab_size,
                                                 open_token);
}

}  // namespace latent::structured
