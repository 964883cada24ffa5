#include "structured/after_reasoning.h"

#include <algorithm>
#include <utility>

namespace latent::structured {
namespace {

class AfterReasoningConstraint final : public engine::TokenConstraint {
 public:
  AfterReasoningConstraint(std::unique_ptr<engine::TokenConstraint> grammar, int32_t end_token,
                           int64_t vocab_size)
      : grammar_(std::move(grammar)), end_token_(end_token), vocab_size_(vocab_size) {}

  void FillNextTokenBitmask(uint32_t* bitmask) override {
    if (reasoning_ended_) {
      grammar_->FillNextTokenBitmask(bitmask);
      return;
    }
    // Every token of the vocabulary, as an unconstrained draw has: the reasoning is free text,
    // and EOS there ends the sample as it would without a grammar.
    std::fill_n(bitmask, engine::BitmaskWords(vocab_size_), ~0u);
  }

  bool Accept(int32_t token) override {
    if (reasoning_ended_) return grammar_->Accept(token);
    // The end token itself is the reasoning's, not the answer's: the grammar starts after it.
    if (token == end_token_) reasoning_ended_ = true;
    return true;
  }

  bool IsTerminated() const override { return reasoning_ended_ && grammar_->IsTerminated(); }

 private:
  std::unique_ptr<engine::TokenConstraint> grammar_;
  int32_t end_token_;
  int64_t vocab_size_;
  bool reasoning_ended_ = false;
};

class AfterReasoningFactory final : public engine::TokenConstraintFactory {
 public:
  AfterReasoningFactory(std::shared_ptr<const engine::TokenConstraintFactory> grammar,
                        int32_t end_token, int64_t vocab_size)
      : grammar_(std::move(grammar)), end_token_(end_token), vocab_size_(vocab_size) {}

  std::unique_ptr<engine::TokenConstraint> Start() const override {
    return std::make_unique<AfterReasoningConstraint>(grammar_->Start(), end_token_, vocab_size_);
  }

 private:
  std::shared_ptr<const engine::TokenConstraintFactory> grammar_;
  int32_t end_token_;
  int64_t vocab_size_;
};

}  // namespace

std::shared_ptr<const engine::TokenConstraintFactory> AfterReasoning(
    std::shared_ptr<const engine::TokenConstraintFactory> grammar, int32_t end_token,
    int64_t vocab_size) {
  return std::make_shared<AfterReasoningFactory>(std::move(grammar), end_token, vocab_size);
}

}  // namespace latent::structured
