// Package openai is the OpenAI model provider of the chat layer: [Responses]
// speaks the OpenAI Responses API (optionally in background mode, resumed by
// response id after a crash), and [ChatCompletions] any OpenAI-compatible
// Chat Completions endpoint (OpenAI, Ollama, llama.cpp, vLLM). Both
// implement llm.Provider through the official openai-go SDK, whose retries
// are off: the chat layer decides what to retry.
//
// Only a program that builds a provider imports this package (agentd's
// binary does, from its --provider flag), so the SDK is compiled there and
// not by the library packages that take an llm.Provider.
//
// The key comes from the config, else OPENAI_API_KEY, else the file named
// by OPENAI_API_KEY_FILE; llm.ErrMissingAPIKey when it is needed and
// absent. Errors are *llm.Error, classified as retryable or terminal where
// they are made; package llm's doc describes the model and continuations.
package openai
