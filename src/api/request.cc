#include "deepinfer/request.h"

#include <nlohmann/json.hpp>

#include "api/engine_impl.h"
#include "api/model_impl.h"
#include "protocol/chat.h"
#include "protocol/openai_request.h"

namespace deepinfer::api {

StatusOr<Request> RequestFromOpenAiJson(const Model& model, const std::string& json_body, const GenerationParams& defaults) {
  const nlohmann::json body = nlohmann::json::parse(json_body, nullptr, false);
  if (body.is_discarded()) return InvalidArgument("not valid JSON");
  DI_ASSIGN_OR_RETURN(RequestParams params, ParseRequestParams(body, CompileParams(defaults)));
  const auto& impl = static_cast<const ModelImpl&>(model);
  StatusOr<std::vector<int32_t>> prompt =
      body.is_object() && body.contains("messages")
          ? impl.chat().EncodeRequest(nlohmann::ordered_json::parse(json_body), body.value("add_generation_prompt", true))
          : ParsePrompt(body, *impl.internal().tokenizer);
  if (!prompt.ok()) return prompt.status();
  return Request{std::move(prompt).value(), GenerationParams(std::move(params))};
}

}  // namespace deepinfer::api
