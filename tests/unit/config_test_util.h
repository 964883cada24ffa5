// What the config unit tests share: a config.json (text or JSON) parsed as ModelConfig::FromJson
// reads it, the message it is refused with, and EXPECT_CONFIG_ERROR.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>

#include "base/error.h"
#include "model/model_config.h"

namespace latent::model::config_test {

using Json = nlohmann::json;

inline ModelConfig Parse(const std::string& text) {
  return ModelConfig::FromJson(text, "config.json");
}
inline ModelConfig Parse(const char* text) { return Parse(std::string(text)); }
inline ModelConfig Parse(const Json& j) { return Parse(j.dump()); }

// The message FromJson throws for `text`, or "(no error)".
inline std::string ErrorFor(const std::string& text) {
  try {
    Parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}
inline std::string ErrorFor(const char* text) { return ErrorFor(std::string(text)); }
inline std::string ErrorFor(const Json& j) { return ErrorFor(j.dump()); }

// `config` with `key` set to `value`: the config a refusal test feeds to EXPECT_CONFIG_ERROR.
inline Json With(Json config, const std::string& key, Json value) {
  config[key] = std::move(value);
  return config;
}

}  // namespace latent::model::config_test

// Every message starts with the source, then names the problem.
#define EXPECT_CONFIG_ERROR(input, substring)                                  \
  do {                                                                         \
    const std::string message = ::latent::model::config_test::ErrorFor(input); \
    EXPECT_EQ(message.rfind("config.json", 0), 0u) << message;                 \
    EXPECT_NE(message.find(substring), std::string::npos) << message;          \
  } while (0)
