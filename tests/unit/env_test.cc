// base/env.h: environment settings are read strictly; a value latent cannot read is an error that
// names the variable, never the default in disguise (LATENT_CHECK_WEIGHTS=false used to turn the
// scan on, LATENT_THREADS=abc to run on every core).
#include "base/env.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "base/error.h"

namespace latent {
namespace {

std::string ErrorOf(void (*fn)()) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Env, BooleansTakeTheUsualSpellings) {
  for (const char* yes : {"1", "true", "TRUE", "yes", "On"}) EXPECT_TRUE(ParseEnvBool("V", yes));
  for (const char* no : {"0", "false", "False", "no", "OFF"}) EXPECT_FALSE(ParseEnvBool("V", no));
  EXPECT_EQ(ErrorOf([] { ParseEnvBool("LATENT_CHECK_WEIGHTS", "2"); }),
            "LATENT_CHECK_WEIGHTS='2': expected 1, true, yes or on, or 0, false, no or off");
}

TEST(Env, IntegersMustBeWholeAndInRange) {
  EXPECT_EQ(ParseEnvInteger("V", "12", 1, 1024), 12);
  EXPECT_EQ(ParseEnvInteger("V", "1024", 1, 1024), 1024);
  for (const char* bad : {"abc", "-3", "0", "1025", "12x", " 12", "1e3", "99999999999999999999"}) {
    try {
      ParseEnvInteger("LATENT_THREADS", bad, 1, 1024);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()),
                std::string("LATENT_THREADS='") + bad + "': expected an integer from 1 to 1024");
    }
  }
}

TEST(Env, UnsetOrEmptyIsTheDefault) {
  ::unsetenv("LATENT_ENV_TEST");
  EXPECT_FALSE(EnvInteger("LATENT_ENV_TEST", 0, 5).has_value());
  EXPECT_FALSE(EnvBool("LATENT_ENV_TEST").has_value());
  ::setenv("LATENT_ENV_TEST", "", 1);
  EXPECT_FALSE(EnvBool("LATENT_ENV_TEST").has_value());
  ::setenv("LATENT_ENV_TEST", "off", 1);
  EXPECT_EQ(EnvBool("LATENT_ENV_TEST"), false);
  ::unsetenv("LATENT_ENV_TEST");
}

TEST(Env, ChoiceIsOneOfItsNames) {
  ::unsetenv("LATENT_ENV_TEST");
  EXPECT_FALSE(EnvChoice("LATENT_ENV_TEST", {"a", "b"}).has_value());
  ::setenv("LATENT_ENV_TEST", "b", 1);
  EXPECT_EQ(EnvChoice("LATENT_ENV_TEST", {"a", "b"}), "b");
  ::setenv("LATENT_ENV_TEST", "B", 1);  // names are exact, as the kernels compare them
  try {
    EnvChoice("LATENT_ENV_TEST", {"a", "b"});
    ADD_FAILURE() << "B accepted";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "LATENT_ENV_TEST='B': expected one of a, b");
  }
  ::unsetenv("LATENT_ENV_TEST");
}

}  // namespace
}  // namespace latent
