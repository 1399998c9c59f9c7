// Chat templates: a Jinja2 subset engine that renders the templates real models ship, with the environment
// transformers uses (trim_blocks, lstrip_blocks, loop controls), checked against @huggingface/jinja.
#pragma once
#include <memory>
#include <string>

#include "deepinfer/status.h"

namespace deepinfer::jinja {

struct Node;

class Template {
 public:
  // Parses a template; syntax errors name the line and what was expected.
  static StatusOr<std::unique_ptr<Template>> Parse(const std::string& source);
  ~Template();
  // Renders with a context given as JSON text (an object: messages, tools, add_generation_prompt, bos_token, ...).
  // raise_exception(...) in the template surfaces as an InvalidArgument status with its message.
  StatusOr<std::string> Render(const std::string& context_json) const;

 private:
  Template() = default;
  std::shared_ptr<Node> root_;
};

}  // namespace deepinfer::jinja
