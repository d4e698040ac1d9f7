// Package llm is the model-provider layer of the chat feature: one small
// streaming interface, [Provider], the built-in [Local] model, and what a
// provider package builds on ([NewStream], [Sink], [EnvSecret],
// [MissingKey], [RetryableStatus]).
//
//   - [Local]: a deterministic built-in model without network, for demos
//     and tests. A story for prompts that mention "story", a short reply
//     otherwise, paced at a configurable token rate. Lines of the form
//     "/tool <name> <arguments>" in the user message make it call those
//     tools, one per step, and then answer by quoting their results.
//   - chat/llm/openai: the OpenAI Responses API (openai-go/v3), optionally
//     in background mode, and any OpenAI-compatible Chat Completions
//     endpoint (OpenAI, Ollama, llama.cpp, vLLM).
//   - chat/llm/anthropic: the Anthropic Messages API (anthropic-sdk-go).
//
// The vendor SDKs are compiled only by a program that imports one of those
// packages (agentd's binary builds the provider its flags name), so the
// chat layer and everything else that imports llm stays free of them, as
// litestream keeps each storage backend in a package of its own.
//
// # Model
//
// A [Request] is the visible conversation plus options. Stream returns an
// iter.Seq2[Delta, error]: deltas in the order the model produced them
// (text, reasoning, tool input fragments, complete tool calls, response
// metadata), ending with exactly one [Finish] delta that carries the finish
// reason and [Usage]. Or it ends with one error:
//
//   - an [*Error], classified when it is created as retryable (429, 5xx,
//     overloaded or server error events, a cut connection, a stream that
//     ended without its terminal event) or terminal (bad credentials,
//     invalid request, a continuation that does not match). Callers check
//     Error.Retryable, [IsRetryable] or errors.Is(err, [ErrRetryable]) /
//     errors.Is(err, [ErrTerminal]); nothing parses messages.
//   - the context's cause when ctx ended (a stop, a shutdown); it is not a
//     provider failure and is not wrapped.
//
// The SDKs' own retries are disabled: the chat layer decides what to retry
// and how to continue. Providers keep no state between calls and are safe
// for concurrent use. Constructors read only the API key from the
// environment (OPENAI_API_KEY, ANTHROPIC_API_KEY) and fail with
// [ErrMissingAPIKey] when it is needed and absent.
//
// # Continuing an interrupted turn
//
// The chat layer persists what it streams: the text so far and, from
// [ResponseMeta] deltas and the SequenceNumber of every OpenAI Responses
// delta, the response id and the last sequence number. After a crash or a
// retryable error it calls Stream again with the same Messages and a
// [Continuation]:
//
//	req.Continue = &llm.Continuation{
//		PartialText:    textSoFar,      // what the user already saw
//		ResponseID:     lastResponseID, // "" if none was received
//		SequenceNumber: lastSeq,        // OpenAI Responses only
//	}
//
// and appends the text it yields to textSoFar. Each provider does what its
// API allows:
//
//   - openai.Responses with a ResponseID retrieves the response. A background
//     response still running is streamed again with
//     GET /responses/{id}?stream=true&starting_after=<SequenceNumber>; a
//     finished (or non-background) one yields its stored text beyond
//     PartialText and its function calls. A non-background response still
//     running is a retryable error ([ErrNotReady]).
//   - anthropic.Provider, openai.ChatCompletions, and openai.Responses
//     without a ResponseID
//     send the partial answer as an assistant message followed by the user
//     message [ContinuePrompt] (current models reject a final assistant
//     prefill). The hidden prompt is part of the request only; keeping it out
//     of the visible history is the chat layer's job.
//   - Local yields the rest of the same deterministic answer, so
//     PartialText + continuation == the uninterrupted answer.
//
// An empty PartialText with no ResponseID is a plain retry.
//
// # Testing
//
// Package llmtest runs fake servers that speak each API's real streaming wire
// format, with scripted error events and cut connections.
package llm
