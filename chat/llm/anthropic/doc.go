// Package anthropic is the Anthropic model provider of the chat layer:
// [Provider] speaks the Anthropic Messages API through the official
// anthropic-sdk-go, whose retries are off: the chat layer decides what to
// retry. An interrupted answer is continued by sending the partial text and
// llm.ContinuePrompt.
//
// Only a program that builds a provider imports this package (agentd's
// binary does, from its --provider flag), so the SDK is compiled there and
// not by the library packages that take an llm.Provider.
//
// The key comes from the config, else ANTHROPIC_API_KEY, else the file
// named by ANTHROPIC_API_KEY_FILE; llm.ErrMissingAPIKey when it is needed
// and absent. Errors are *llm.Error, classified as retryable or terminal
// where they are made.
package anthropic
