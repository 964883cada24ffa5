// latent::InternalError (a failed LATENT_CHECK, FailInternal) against latent::Error (bad input),
// and the exit code and message the CLI gives each (base/exit_code.h, docs/reliability.md).
#include <gtest/gtest.h>

#include <exception>
#include <new>
#include <stdexcept>
#include <string>

#include "base/error.h"
#include "base/error_context.h"
#include "base/exit_code.h"

namespace latent {
namespace {

std::exception_ptr ThrownBy(void (*thrower)()) {
  try {
    thrower();
  } catch (...) {
    return std::current_exception();
  }
  ADD_FAILURE() << "nothing was thrown";
  return nullptr;
}

TEST(InternalError, AFailedCheckThrowsIt) {
  try {
    LATENT_CHECK(2 + 2 == 5);
    FAIL() << "the check passed";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("error_test.cc:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(": check failed: 2 + 2 == 5"), std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(LATENT_CHECK(2 + 2 == 4));
}

// Every boundary that survives bad input (catch (const Error&)) survives a bug too.
TEST(InternalError, IsALatentError) {
  EXPECT_THROW(FailInternal("a broken invariant"), InternalError);
  EXPECT_THROW(FailInternal("a broken invariant"), Error);
  EXPECT_THROW(Fail("bad input"), Error);
  try {
    Fail("bad input");
  } catch (const InternalError&) {
    FAIL() << "bad input was taken for an internal error";
  } catch (const Error&) {
  }
}

// A boundary that adds context to an error from below (Tokenizer::FromDir adds the directory,
// FromTiktoken the file) used Fail(e.what(), ...), which made a failed check bad input: exit 2.
TEST(InternalError, FailLikeKeepsTheKindAndAddsTheContext) {
  auto with_dir = [](void (*inner)()) -> std::exception_ptr {
    try {
      try {
        inner();
      } catch (const Error& e) {
        FailLike(e, e.what(), " (in /models/x)");
      }
    } catch (...) {
      return std::current_exception();
    }
    return nullptr;
  };
  const ExitOutcome bug = ExitOutcomeOf(with_dir([] { FailInternal("bpe: merge rank 3 twice"); }));
  EXPECT_EQ(bug.code, 1);
  EXPECT_EQ(bug.error, "internal error: bpe: merge rank 3 twice (in /models/x)");
  const ExitOutcome bad = ExitOutcomeOf(with_dir([] { Fail("tokenizer.json: no model"); }));
  EXPECT_EQ(bad.code, 2);
  EXPECT_EQ(bad.error, "error: tokenizer.json: no model (in /models/x)");
}

TEST(ExitOutcome, BadInputExits2) {
  const ExitOutcome o = ExitOutcomeOf(ThrownBy([] { Fail("config.json: hidden_size: 0"); }));
  EXPECT_EQ(o.code, 2);
  EXPECT_EQ(o.error, "error: config.json: hidden_size: 0");
}

TEST(ExitOutcome, AFailedCheckExits1AsAnInternalError) {
  const ExitOutcome o = ExitOutcomeOf(ThrownBy([] { LATENT_CHECK(1 > 2); }));
  EXPECT_EQ(o.code, 1);
  EXPECT_TRUE(o.error.starts_with("internal error: ")) << o.error;
  EXPECT_NE(o.error.find("check failed: 1 > 2"), std::string::npos) << o.error;
  const ExitOutcome named = ExitOutcomeOf(ThrownBy([] { FailInternal("unknown cache dtype"); }));
  EXPECT_EQ(named.code, 1);
  EXPECT_EQ(named.error, "internal error: unknown cache dtype");
}

TEST(ExitOutcome, AnythingElseExits1) {
  const ExitOutcome alloc = ExitOutcomeOf(ThrownBy([] { throw std::bad_alloc(); }));
  EXPECT_EQ(alloc.code, 1);
  EXPECT_TRUE(alloc.error.starts_with("internal error: ")) << alloc.error;
  const ExitOutcome library = ExitOutcomeOf(ThrownBy([] { throw std::runtime_error("json"); }));
  EXPECT_EQ(library.code, 1);
  EXPECT_EQ(library.error, "internal error: json");
  const ExitOutcome unknown = ExitOutcomeOf(ThrownBy([] { throw 42; }));
  EXPECT_EQ(unknown.code, 1);
  EXPECT_EQ(unknown.error, "internal error: an unknown exception");
}

}  // namespace
}  // namespace latent
