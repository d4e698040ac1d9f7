// Package llmtest runs fake model servers that speak the real streaming wire
// formats of the OpenAI Responses API, the Chat Completions API and the
// Anthropic Messages API, so provider code is tested through the real SDKs
// without a network.
//
// A [Server] answers each request with a [Reply] chosen by a handler
// function, and records every request for assertions. A Reply is either a
// JSON body with a status (errors, GET /responses/{id}) or a list of
// server-sent [Event]s, built with the [Responses], [Chat] and [Anthropic]
// builders. [Cut] in an event list makes the server hijack the connection
// and close it mid-stream, the way a dropped connection looks to a client.
//
// # Usage
//
//	srv := llmtest.NewServer(t, func(r llmtest.Request) llmtest.Reply {
//		return llmtest.Stream(llmtest.NewAnthropic("msg_1", "m", 10).
//			Text("Hel", "lo").Stop("end_turn", 2).Events())
//	})
//	p, _ := anthropic.New(anthropic.Config{APIKey: "k", BaseURL: srv.URL, Model: "m"})
//
// Nothing here is safe for production; the package has no state outside
// the values it returns.
package llmtest
