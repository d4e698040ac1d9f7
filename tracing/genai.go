package tracing

import "go.opentelemetry.io/otel/attribute"

// Attribute keys of the OpenTelemetry GenAI semantic conventions
// (semantic-conventions v1.41.0, gen-ai: agent spans, inference spans,
// tool execution; status Development), as Forever's spans use them.
const (
	GenAIOperationName            = attribute.Key("gen_ai.operation.name")
	GenAIProviderName             = attribute.Key("gen_ai.provider.name")
	GenAIAgentID                  = attribute.Key("gen_ai.agent.id")
	GenAIAgentName                = attribute.Key("gen_ai.agent.name")
	GenAIConversationID           = attribute.Key("gen_ai.conversation.id")
	GenAIRequestModel             = attribute.Key("gen_ai.request.model")
	GenAIRequestStream            = attribute.Key("gen_ai.request.stream")
	GenAIResponseID               = attribute.Key("gen_ai.response.id")
	GenAIResponseFinish           = attribute.Key("gen_ai.response.finish_reasons")
	GenAIUsageInputTokens         = attribute.Key("gen_ai.usage.input_tokens")
	GenAIUsageOutputTokens        = attribute.Key("gen_ai.usage.output_tokens")
	GenAIToolName                 = attribute.Key("gen_ai.tool.name")
	GenAIToolCallID               = attribute.Key("gen_ai.tool.call.id")
	GenAIToolType                 = attribute.Key("gen_ai.tool.type")
	GenAIToolDescription          = attribute.Key("gen_ai.tool.description")
	GenAIToolCallArguments        = attribute.Key("gen_ai.tool.call.arguments")
	GenAIToolCallResult           = attribute.Key("gen_ai.tool.call.result")
	GenAIInputMessages            = attribute.Key("gen_ai.input.messages")
	GenAIOutputMessages           = attribute.Key("gen_ai.output.messages")
	GenAISystemInstructions       = attribute.Key("gen_ai.system_instructions")
	GenAIOutputType               = attribute.Key("gen_ai.output.type")
	ErrorType                     = attribute.Key("error.type")
	GenAIResponseTimeToFirstChunk = attribute.Key("gen_ai.response.time_to_first_chunk")
)

// Values of gen_ai.operation.name, which also begin the span names:
// "invoke_agent chat", "chat gpt-5", "execute_tool clock".
const (
	OpInvokeAgent = "invoke_agent"
	OpChat        = "chat"
	OpExecuteTool = "execute_tool"
)

// Forever's own attributes, events and span names beside the GenAI ones.
const (
	// AgentID is the agent id on every span about one agent (command,
	// fiber, turn).
	AgentID = attribute.Key("forever.agent.id")
	// RequestID is a chat turn's request id; StreamID its chat stream.
	RequestID = attribute.Key("forever.turn.request_id")
	StreamID  = attribute.Key("forever.turn.stream_id")
	// TurnOutcome is how a turn ended: completed, failed, interrupted,
	// waiting (for a tool answer) or abandoned.
	TurnOutcome = attribute.Key("forever.turn.outcome")
	// UsageCost is the cost of the usage on the span (a provider call's,
	// or a turn's), in dollars as a decimal string ("0.0042"), priced by
	// the daemon's price table (--prices).
	UsageCost = attribute.Key("forever.usage.cost")
	// Step is the step of a turn a chat or execute_tool span belongs to,
	// from 1.
	Step = attribute.Key("forever.turn.step")
	// Continued is set on a chat span that continues an answer cut off
	// (a crash, a retryable provider error).
	Continued = attribute.Key("forever.chat.continued")
	// ModelLimiterWait is the seconds a chat span's call waited for the
	// model's rate limit (package modellimit) before it started.
	ModelLimiterWait = attribute.Key("forever.model_limiter.wait_seconds")
	// ToolOutcome is how a tool call ended: ok, error, replayed (its
	// recorded result, it did not run), maybe_executed (an unsafe call cut
	// off by a crash, not run again), interrupted.
	ToolOutcome = attribute.Key("forever.tool.outcome")
	// FiberID, FiberName, FiberAttempt: a fiber and its recovery attempt.
	FiberID      = attribute.Key("forever.fiber.id")
	FiberName    = attribute.Key("forever.fiber.name")
	FiberAttempt = attribute.Key("forever.fiber.attempt")
	// StepKey, OpID and StepOutcome describe a fiber step: run, rerun
	// (started before a crash, run again under its op id), replayed (its
	// recorded result) or maybe_executed.
	StepKey     = attribute.Key("forever.fiber.step.key")
	OpID        = attribute.Key("forever.fiber.op.id")
	StepOutcome = attribute.Key("forever.fiber.step.outcome")
	// Verb is a command's verb; Forwarded marks a command run for
	// another node; Node is the node (server name) that ran it.
	Verb      = attribute.Key("forever.command.verb")
	Forwarded = attribute.Key("forever.command.forwarded")
	Node      = attribute.Key("forever.node")
	// Partition and Epoch name a partition lease.
	Partition = attribute.Key("forever.partition")
	Epoch     = attribute.Key("forever.partition.epoch")

	// EventRecovery is the span event of each recovery, on the span of
	// the work recovered (a turn's invoke_agent, a fiber.recover span),
	// with its attempt in RecoveryAttempt.
	EventRecovery   = "forever.recovery"
	RecoveryAttempt = attribute.Key("forever.recovery.attempt")
	// EventRetry is the span event of a retryable provider error that a
	// turn continues from in process, with the attempt.
	EventRetry = "forever.retry"
)
