package openai

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	sdk "github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/packages/ssestream"

	"github.com/forever-agents/forever/chat/llm"
)

// openAIKey resolves the API key: the configured one, else OPENAI_API_KEY,
// else the file named by OPENAI_API_KEY_FILE.
func openAIKey(configured string) (string, error) {
	if configured != "" {
		return configured, nil
	}
	return llm.EnvSecret("OPENAI_API_KEY")
}

// isOpenAIHost reports whether baseURL is empty (the default endpoint) or
// points at api.openai.com.
func isOpenAIHost(baseURL string) bool {
	if baseURL == "" {
		return true
	}
	u, err := url.Parse(baseURL)
	return err == nil && strings.EqualFold(u.Hostname(), "api.openai.com")
}

// openAIOptions builds SDK options without reading the environment (the SDK
// client would otherwise pick up OPENAI_BASE_URL, OPENAI_ORG_ID and others).
// SDK retries are off: the chat layer owns retries and recovery.
func openAIOptions(apiKey, baseURL string, hc *http.Client) []option.RequestOption {
	if hc == nil {
		hc = &http.Client{}
	}
	opts := []option.RequestOption{
		option.WithHTTPClient(hc),
		option.WithEnvironmentProduction(),
		option.WithMaxRetries(0),
	}
	if baseURL != "" {
		opts = append(opts, option.WithBaseURL(baseURL))
	}
	if apiKey != "" {
		opts = append(opts, option.WithAPIKey(apiKey))
	}
	return opts
}

func requestOptions(req llm.Request) []option.RequestOption {
	if req.IdempotencyKey == "" {
		return nil
	}
	return []option.RequestOption{option.WithHeader("Idempotency-Key", req.IdempotencyKey)}
}

// openAIError classifies an error from the OpenAI SDK. It returns the
// context's cause when ctx is done.
func openAIError(ctx context.Context, provider string, err error) error {
	if cerr := llm.ContextErr(ctx); cerr != nil {
		return cerr
	}
	var apiErr *sdk.Error
	if errors.As(err, &apiErr) {
		code := apiErr.Code
		if code == "" {
			code = apiErr.Type
		}
		e := &llm.Error{Provider: provider, Retryable: llm.RetryableStatus(apiErr.StatusCode), Status: apiErr.StatusCode, Code: code, Err: err}
		if apiErr.Response != nil {
			e.RetryAfter = llm.ParseRetryAfter(apiErr.Response.Header, time.Now())
		}
		return e
	}
	var se *ssestream.StreamError
	if errors.As(err, &se) {
		// data: {"error": {"type": ..., "code": ..., "message": ...}} inside
		// a 200 stream (Chat Completions servers, proxies).
		var body struct {
			Error struct {
				Type string `json:"type"`
				Code any    `json:"code"`
			} `json:"error"`
		}
		_ = json.Unmarshal(se.Event.Data, &body)
		code := body.Error.Type
		if c, ok := body.Error.Code.(string); ok && c != "" {
			code = c
		}
		return &llm.Error{Provider: provider, Retryable: retryableOpenAICode(code), Code: code, Err: err}
	}
	// Transport failures, a cut connection (unexpected EOF), undecodable
	// events: the request may succeed when tried again.
	return &llm.Error{Provider: provider, Retryable: true, Err: err}
}

// retryableOpenAICode classifies the code of an error event or a failed
// response. Unknown codes are retryable: the chat layer caps attempts.
func retryableOpenAICode(code string) bool {
	switch code {
	case "invalid_request_error", "invalid_prompt", "authentication_error",
		"permission_error", "invalid_api_key", "not_found_error",
		"context_length_exceeded", "content_filter", "insufficient_quota",
		"model_not_found", "unsupported_parameter", "bio_policy",
		"misalignment_policy_violation", "data_residency_mismatch":
		return false
	}
	if strings.HasPrefix(code, "invalid_") || strings.HasPrefix(code, "image_") {
		return false
	}
	return true
}
