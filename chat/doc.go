// Package chat runs chat agents: conversations whose turns are durable
// fibers streaming model output as chunks into the event log, recovered
// after a crash by continuing the interrupted answer.
//
// # Roles
//
// An Agent is a façade over roles, each a type with files of its own. The
// Agent embeds the first three, so their methods are the Agent's:
//
//   - commands, the conversation's commands (commands.go, send.go,
//     state.go, multitask.go, batch.go, answer.go, steer.go, truncate.go,
//     rollback.go, interrupt.go): each checks its input and, to start a
//     turn, calls the Agent's start (turn_start.go), in steps: takeSlot,
//     admitStart, goTurn, startAppends, then the gate tells the turn's
//     fiber what became of the appends. A command runs no turn itself.
//   - budgets (budget.go, budget_shared.go, budget_soft.go): the budgets'
//     limits, spend and the answers to a turn parked at a soft limit.
//   - children (subagent_run.go): sub-agent calls between agents: links,
//     waits for a child's end, and a child's notice to its parent.
//   - turnRun, one run of a turn (turn_run.go, turn.go, turn_end.go,
//     step.go, toolrun.go, and the run's checks in the budget and
//     sub-agent files): the state of the running turn (its fiber, stream
//     writer, span, snapshot, step counters) with the loop (runTurn,
//     modelPhase, toolsPhase, stepDone, streamOnce, stash) and the outcomes
//     (completeTurn, failTurn, abortTurn and their record* steps) as its
//     methods. It owns the agent's turn slot (slot.go) once its command
//     handed it over, and releases it once (turnRun.release); the slot
//     points at the run that holds it (activeTurn.run).
//   - Recovery (recovery.go, recovery_decide.go, recovery_run.go,
//     version.go, abandon.go): a turn fiber found after a crash is
//     gathered, decided (decideRecovery, no I/O) and carried out by one
//     executor (turnRecovery), whose run holds the slot it claims.
//
// The Agent keeps what the roles share: the config, log, views, metrics,
// the turn slot and the start of a turn.
//
// # Model
//
// Everything is an event. An agent's conversation and bookkeeping are
// events on its events subject (<prefix>.evt.<agent>):
//
//	message.appended   Message {id, role, parts, requestId, hidden, createdAt}
//	message.updated    {id, parts}          replaces the parts of a message (a continuation)
//	message.part       {id, type, part, parts, b} one slice (b, base64) of a message.appended or
//	                                        message.updated too large for one event
//	messages.truncated {afterId}            drops every message after afterId ("" = all)
//	turn.started       {requestId, streamId, messageId, assistantMessageId, continues?, body, tools, base?, answers?, message?, fiberId?, traceparent?, parentSpanId?}
//	turn.completed     {requestId, finishReason, message?, usage?} message and usage: the answer's
//	                                        Message and the usage.recorded data, at record format 8
//	turn.failed        {requestId, error}
//	turn.interrupted   {requestId, reason}
//	usage.recorded     {requestId, input, output}
//	state.set          {version, value}
//	interrupt.set      {name}
//	interrupt.cleared  {name}
//	subagent.started   ChildLink {agent, type?, mode, callId, requestId, streamId, messageId,
//	                   status: "running", parentRequestId, startedAt}
//	subagent.ended     ChildLink {... status: completed|failed|interrupted|cancelled, endedAt,
//	                   output? (ChildOutput), error?, usage?: {input, output, calls}}
//
// and each turn's output is one chat stream on the chunks subject
// <prefix>.chunk.<agent>.<streamId>: AI SDK UI message stream chunks (start,
// then per step start-step, text-*, reasoning-*, tool-input-*, the step's
// tool-output-* / tool-approval-request, finish-step; then finish, error or
// abort), written through a StreamWriter over the process's shared
// eventlog.Batcher. The chunk format, the chunk events, the writer and the
// streams projection live in package chat/chunk, which imports only
// eventlog, so stream readers need not compile the provider SDKs; chat
// re-exports them (Chunk, Assembler, StreamWriter, StreamInfo, Streams, the
// Chunk* and Status* constants).
//
// # Stored format
//
// Events and chunks are history: they are read back by the views, by
// recovery and by replay clients long after the version that wrote them.
// Every struct written into an event has explicit JSON tags (llm.Tool keeps
// the Go field names it was first stored with), and fields are only ever
// added. Golden histories are kept from now on: testdata/golden holds event
// logs of real turns (single step, interrupted before and after recovery,
// a tool call, failed, abandoned), one stored event per line, and
// TestGoldenHistories replays each into a fresh log and checks that the
// messages, turns and streams views, the chunk assembler and recovery still
// read them. A change that breaks them breaks stored conversations. Record
// a history for each new kind of turn (go test ./chat/ -run
// TestGoldenHistories -update); never regenerate a committed one to make a
// format change pass.
//
// A Store (OpenStore, one per process) projects them into Pebble views:
// streams (stream metadata: status, request id, sequences), messages (the
// conversation per agent, by position, so Messages pages), chatstate (the
// state value and version), usage (per-agent roll-up), interrupts (set flags)
// and turns (each turn's request context and outcome; the active and last
// turn). Apply functions read only events, so every view is rebuilt exactly
// from the log.
//
// An Agent (New, one per agent id) writes them. Send starts the turn as a
// background fiber named "__chat_turn:<requestId>" (fiber.Runner.Go, which
// holds keepalive), appends turn.started carrying the user message
// (message), and lets the turn run. The turn builds an llm.Request from
// the history (hidden messages included), maps provider deltas to chunks,
// and stashes {streamId, requestId, chunkIndex, responseId,
// sequenceNumber, textAtSequence, attempts} after flushing the chunks,
// every StashInterval or StashChunks chunks and, for a provider that
// resumes a response by its id (llm.ResumesByID: OpenAI Responses), when
// the response id appears. It ends with finish (carrying the usage in its
// messageMetadata), the assistant message, usage.recorded and
// turn.completed (at record format 8, Config.EndRecordsWritable, one
// turn.completed carrying the message and the usage); a terminal provider error with an error chunk and
// turn.failed; a Cancel or the "turn" interrupt with an abort chunk, the
// partial answer as the assistant message, and turn.interrupted. A
// retryable provider error continues the answer in process (a Continuation
// with the text so far), counted against MaxRecoveryAttempts.
//
// A chat command is atomic because its user message is stored inside its
// turn.started (see Invariants). Two other ways were weighed. One atomic
// batch of fiber.started, message.appended and turn.started was built and
// measured: nats-server 2.15 stages every atomic batch in a synced store
// of its own, and a batch of three took 14 ms where one synced append took
// 0.6 ms (three, 2 ms) on the development machine under load, in both sync
// modes; go run ./bench -run '^chat-send$' -sync both gave Send a p50 of
// 24 ms with the batch against 9-11 ms with separate appends. And a
// recovery that answers a stored user message left without its turn would
// run that turn without the request's body and client tools, which only
// turn.started holds. Storing the message in turn.started makes that state
// impossible instead of repairing it, at no extra write: the same bench,
// two runs against the code before, alternating, gave Send a p50 of
// 9.2-9.6 ms against 11.1-13.7 ms under sync always and 5.7-5.9 ms
// against 8.9-9.1 ms under interval (Send waits for the views once, not
// after each append).
//
// # Steps and tools
//
// A turn is a loop of steps. Each step is one provider call (start-step
// ... finish-step); when the model calls tools, the server tools
// (Config.Tools, built with NewTool from typed Go functions, their JSON
// schema generated by github.com/google/jsonschema-go) run, each as a
// fiber.Step keyed by "tool:"+call id, at most Config.MaxParallelTools at
// once, and their outputs are written in call order; then the model is
// called again with the calls and results. Config.MaxSteps (20) ends a
// runaway loop (turn.completed "step-limit", the finish chunk "tool-calls").
// A tool's ctx carries its ToolCall, whose IdempotencyKey (from agent, turn
// and call id) is the same across recoveries, for the tool to pass
// upstream.
//
// The turn's phase is explicit (step.go): model, tools, step-done, finish,
// client. resumePhase derives it from the stored stream alone, so each crash
// point of a step is a state with a test (TestToolCrashPoints):
//
//   - while the model streams: the step's text is continued (or the step
//     retried when it streamed nothing); earlier steps reach the model as
//     messages, only the current step's text as the continuation; a step
//     that already holds tool calls keeps them as the model's output;
//   - after tool-input-available, before the tool ran: the tool runs;
//   - while a tool runs: an Idempotent tool runs again with the same key;
//     an Unsafe one (the default) is not run again: its output is the
//     error ErrTextMaybeExecuted and the model decides;
//   - after a result was recorded (op.completed), before its output chunk:
//     the recorded result is written, the tool does not run;
//   - after all outputs, before the next call: the next step begins.
//
// A call of a client tool (offered in the request, not a server tool), or
// of a server tool that needs approval (tool-approval-request), ends the
// turn waiting (finish "tool-calls"). Agent.Answer (the approve and
// tool-result verbs, or an AI SDK body whose last message is the waiting
// assistant message) starts a turn that records the answers in its
// turn.started with the waiting message's parts (base), continues that
// message in a new stream, ends the answered calls (an approved call runs
// once as a fiber step, a denied one gets tool-output-denied, a client's
// result is written) and goes on with the model. Calls wait at most
// Config.ToolWaitTimeout.
//
// After a crash the fiber.Runner's recovery hook hands the turn fiber to
// Agent.OnFiberRecovered, which resumes it under the same fiber id. It reads
// the stream's stored chunks back (what clients saw) and then: finalizes a
// stream that already ended; retries a turn that streamed nothing; or asks
// Config.OnChatRecovery (default: persist and continue). The choice is
// decideRecovery's, a function of the turn, its stream, its snapshot, the
// attempts and the clock that does no I/O (its cases, in order of
// precedence, are the recoveryKind constants: no turn, outcome recorded,
// runs here, expired, finalize, tools corrupt, version fail, restart,
// exhausted, stash, interrupted, wait, retry, ask, hook failed, abort,
// continue); turnRecovery (recovery_run.go) gathers its input and carries
// out its answer, feeding back what the steps (restart, stash, ask)
// learn. Continuing calls
// the provider with llm.Continuation{PartialText, ResponseID,
// SequenceNumber, TextAtSequence} (a provider resuming after SequenceNumber
// skips the text stored after the stash) and writes its chunks into the same stream after the
// stored ones (same open text block, chunk index continuing), so a client
// replaying the stream sees one message grow; the assistant message is the
// partial plus the continuation, appended once and then updated.
// ContinueLastTurn does the same on demand, in a new stream whose start
// chunk names the continued message.
//
// A turn records the version of the code that started it (turn.started's
// version: its fiber Runner's fiber.Config.Version). When a Runner of
// another version recovers it, the Runner's version policy applies first:
// continue is the recovery above; restart (fiber.Recovered.Restarted)
// closes the open blocks, writes a data-restart chunk ({"from","to"}) that
// drops what the stream showed from the message (the builder drops it on
// every replay too) and answers again from the last message into the same
// stream, one outcome; fail (Agent.OnFiberVersionFailed, wired to
// fiber.Hooks.OnVersionFailed) ends the stream with an error chunk and
// turn.failed, a *VersionError naming both versions. Queued messages
// (FiberVersionPolicy) are always continued (TestRollingUpgradeTurn).
//
// # Context budget
//
// A model call gets the whole stored conversation while it fits
// Config.ContextTokens (estimated, llm.EstimateTokens). Past it, it gets
// the system prompt with a summary of the messages up to one of them and
// the newest messages after it that fit (context.go decides, summary.go
// does). A summary that is due is made before the call as a fiber step
// keyed "summary:<message id>", by the provider asked with
// llm.SummarizePrompt or by Config.Summarize, and stored as
// context.summarized, which the context view keeps and later calls reuse;
// a turn recovered after the step completed reuses its recorded result.
// The conversation is never changed by it.
//
// # Sub-agents
//
// A tool can be an agent (NewAgentTool; AgentTool is the built-in "agent"
// tool, {"agent", "text", "mode"}): a call runs one turn of a child agent,
// wherever it runs, and its output is the child's final text (a
// ChildOutput, which names the child's agent, request and stream). The
// design follows helix-agents' sub-session refs: the link is recorded on
// the parent, the parent suspends while it awaits its children, and
// interrupts and usage go through it.
//
//   - Start. The call's child turn has the request id ChildRequestID(parent,
//     request, call), its idempotency key: Config.Peers.StartChild sends
//     the child a chat command with it (agentd routes it to the child's
//     owner), and a Send whose request id is stored returns that turn, so
//     however often a crash makes the parent send it, the child runs it
//     once. Once the child's turn is durable, the parent appends
//     subagent.started and names the child in its stream: a data-subagent
//     chunk {type, id: call id, data: ChildRef}, written again with the
//     link's final status when it ends (the AI SDK replaces a data part of
//     the same id), and kept in the stored message's parts.
//   - Wait. Every call of the step starts at once; the step waits for its
//     other tools, flushes the stream, and then waits idle: the turn fiber
//     holds no keepalive reference (fiber.Fiber.Idle) and no TurnLimiter
//     admission, so the agent may be deactivated, which interrupts the
//     turn with nothing written. The wait is stored state: the links in
//     the turns view and the stream. A recovered turn whose link still
//     runs is resumed without counting an attempt or asking
//     OnChatRecovery, and waits again.
//   - End. The waiting turn learns that a child's turn ended from the
//     child's notice (the child's turn fiber, once the turn's outcome is
//     stored, calls Peers.NotifyParent, retried, and kept for recovery
//     until it got through; agentd's child-result verb calls ChildEnded),
//     or by reading the child's turn every Config.ChildPoll (10 s), or when
//     recovered: the outcome is always read from the views, caught up with
//     the child's last event, never taken from the notice; where this
//     node's views do not hold the child (Peers is a ChildTurnReader:
//     agentd with owned views), from the child owner's views
//     (Agent.TurnOutcome). It appends
//     subagent.ended with the tool's output (or error, for a child that
//     failed or was interrupted) and the child's usage, then writes the
//     output, once: on recovery a call with an ended link is answered from
//     the link. A child turn the caught-up views do not hold was deleted
//     with its agent (the link is recorded after it was durable): the
//     call fails ("agent X was deleted before it answered") instead of
//     waiting for an end that never comes.
//   - Modes. A persistent child is the agent named and keeps its
//     conversation; an ephemeral child's id is EphemeralChildID(base,
//     parent, request, call): <base>~<parent, ':' as '_'>~<12 hex>, new
//     for every call. A persistent child busy with another turn refuses the
//     call (a tool error).
//   - Refusals. A call of an agent in the chain of callers (ParentRef.Chain,
//     carried in the child's turn.started) is a cycle, and a call that
//     would make a child deeper than Config.MaxDepth (5) is refused too;
//     both with a tool error the model sees (types "cycle" and "depth").
//   - Cancel. A turn that ends without its children's answers (Cancel, the
//     "turn" interrupt, a failure) tells each running child to cancel its
//     turn (Peers.CancelChild, by request id) and records the link
//     cancelled, so every started link ends.
//   - Progress. Config.OnLink is told of every stored link event
//     (subagent.started, subagent.ended); agentd broadcasts it to the
//     parent's watchers, who resume it from a cursor.
//   - Usage. usage.recorded of the parent's turn carries subagents {input,
//     output, calls}: its children's turns' usage (their own and their
//     sub-agents'), apart from input and output, the turn's own; the
//     roll-up (Usage.Subagents) too. Status lists the active turn's
//     children in flight.
//
// # Tracing
//
// With Config.TracerProvider, an Agent traces with the OpenTelemetry GenAI
// semantic conventions (attribute names in package tracing):
//
//	invoke_agent <AgentName>  a turn (internal kind): gen_ai.operation.name, gen_ai.agent.name
//	                          (the agent type), gen_ai.agent.id and gen_ai.conversation.id
//	                          (the agent id), gen_ai.provider.name, gen_ai.request.model,
//	                          forever.turn.request_id and stream_id; at its end
//	                          forever.turn.outcome (completed, waiting, failed,
//	                          interrupted, abandoned), gen_ai.response.finish_reasons and
//	                          the turn's gen_ai.usage.input_tokens and output_tokens
//	chat <model>              a provider call (client kind): gen_ai.request.model,
//	                          gen_ai.provider.name, gen_ai.request.stream, gen_ai.response.id,
//	                          gen_ai.response.finish_reasons, gen_ai.usage.input_tokens and
//	                          output_tokens of the call, forever.turn.step,
//	                          forever.chat.continued for a continuation; error.type
//	execute_tool <tool>       a server tool call: gen_ai.tool.name, gen_ai.tool.call.id,
//	                          gen_ai.tool.type "extension" (run by the agent),
//	                          gen_ai.tool.description, forever.tool.outcome (ok, error,
//	                          replayed, maybe_executed, interrupted); its fiber.step is
//	                          its child
//
// The turn's span is the child of the span in Send's ctx (the command's),
// and its context is stored in turn.started (traceparent, parentSpanId),
// as fiber.started stores the fiber's. A turn that answers a waiting call
// (Answer, AnswerMessage) continues the trace of the turn that asked: its
// span is the child of that turn's, linked to the answering command's.
// The span is ended by the run that records the turn's outcome; a run cut
// off (a crash, a shutdown, another owner) leaves it unended, and the run
// that recovers the turn resumes it (tracing.Tracer.Resume: same trace,
// same span id, same parent, the turn's start) with a forever.recovery
// event for its attempt, so the turn is one span, once, whatever crashed
// under it, and the chat and execute_tool spans of every run are its
// children.
//
// Contents are recorded only with Config.TraceContent: the user message
// and the answer (gen_ai.input.messages and gen_ai.output.messages on
// invoke_agent), each call's messages, system prompt and output
// (gen_ai.input.messages, gen_ai.system_instructions,
// gen_ai.output.messages, in the conventions' JSON), and tool arguments
// and results (gen_ai.tool.call.arguments, gen_ai.tool.call.result). They
// are off by default because prompts and answers hold user data, and spans
// go to a tracing backend, often a third party's, with its own retention
// and access rules, outside what deleting a conversation deletes.
//
// Sub-agents: a tool's ctx carries its execute_tool span
// (trace.SpanFromContext(ctx)). A sub-agent started from it is a child
// invoke_agent: call its Agent.Send, or host.Command, with that ctx; send
// its NATS command with tracing.Inject(ctx, msg.Header); or, to start it
// later from a stored record, store tracing.Format(trace.SpanContextFromContext(ctx))
// and start it under tracing.ContextWithTraceparent(ctx, stored). A child's
// answer that resumes the parent's waiting call (Answer) continues the
// parent turn's trace.
//
// # Invariants
//
//   - A chat command is atomic: the user message is stored in the
//     turn.started that answers it (its message field), one event, so the
//     message and its turn are stored together or not at all. Send's writes
//     are fiber.started and turn.started, one chain (fiber.Along: one round
//     trip, a crash between the two leaving fiber.started alone, as a crash
//     between two appends did; TestStartChainCut), or, after a stale "turn"
//     interrupt, three appends with its interrupt.cleared between them
//     (TestSendStartsInOneChain). Earlier releases also wrote
//     message.appended with the same message; the messages view ignores
//     that copy, having the id, and verify counts it as the same message.
//     Killed before turn.started, a Send leaves at most a turn fiber
//     without a turn, which recovery ends without a word (nothing was
//     acknowledged, nothing is in the conversation); killed after it, the
//     turn is stored with its question and recovery runs it to its end. So
//     every stored user message is answered (TestSendCrashPoints kills the
//     process before each write of Send and of its turn, and a fresh one
//     recovers). Send returns only once turn.started is durable and the
//     views show it; a crash after it is recovered.
//   - A command runs once, whichever nodes it passes through. Its identity
//     is the client's message id, or SendRequest.RequestID (minted by the
//     first node that received the command, and passed along when it is
//     forwarded, retried or re-routed), which is then the message's id and
//     the turn's request id. A Send whose identity is stored with its turn
//     starts nothing and returns that turn (its requestId, streamId,
//     messageId; cursor 0, so the client replays the stream from its
//     start), while the turn runs or after. The views are checked twice, at
//     once and, decisively, under the turn slot after catching up with the
//     log; a copy that gets past them (another process checked before the
//     first copy landed) is refused by the store and gets the original's
//     reply too (TestSendOnce): its fiber.started is conditional on the
//     agent's last event being the one the checks read (fiber.AfterSeq),
//     so it starts no second fiber of the turn beside the original's, even
//     when its runs table does not show that fiber yet (it checks again,
//     and finds the original); and turn.started's event id (JetStream's
//     Nats-Msg-Id) is derived from the agent and the message id. The
//     store's refusal lasts the duplicate window (2 minutes); after it the
//     views alone find the original, which suffices on a fenced log: only
//     the agent's owner writes, under the slot. A message removed by
//     Truncate can be sent again, unless its RequestID is reused,
//     whose turn stays. turn.started names its fiber (fiberId), so the end
//     of a refused copy's fiber never orphans the original turn.
//   - One turn per agent at a time: Send during a turn (or while a crashed
//     turn waits for recovery) follows its Multitask policy (multitask.go):
//     MultitaskReject, the default, returns ErrTurnActive and stores
//     nothing; MultitaskInterrupt cancels the turn and then sends;
//     MultitaskEnqueue stores the message in a queue fiber's fiber.started,
//     and the queue fibers (recovered like turn fibers) start the queued
//     turns in order, each once (TestMultitaskEnqueueRecovered);
//     MultitaskSteer adds it to the running turn (turn.steered), whose next
//     model call, or one more step, reads it (TestMultitaskSteer);
//     MultitaskRollback cancels the turn, truncates the conversation
//     before it once it has ended, and then sends; MultitaskMerge and
//     MultitaskDebounce queue the message in a batch (batch.go), whose
//     one turn answers every message of it, each exactly once, after the
//     batch's quiet window: its turn.started stores them and takes them
//     out of the queue in one event, and a message that turn did not take
//     gets its own (TestMultitaskMergeCrash, TestMultitaskMergeOverflow,
//     TestMultitaskDebounce).
//     A command refused with ErrTurnActive never touches the turn that
//     runs or is recovered: a recovery that finds the turn slot held by a
//     command that has not stored its turn waits for it (that command then
//     finds the recovering turn active and is refused) instead of failing
//     the recovered turn (TestSendRacingRecovery).
//     A turn whose finish chunk is stored but whose records are not yet
//     appended is waited for (bounded): what a client saw in the stream
//     is what Send, Answer and AnswerMessage act on. The turn is marked
//     ending before it writes that chunk, since a client may read it
//     before the write returns (TestSendAsTheFinishIsWritten).
//   - A node that is not the agent's owner writes nothing for its turns:
//     once a write is refused with eventlog.ErrNotOwner or ErrFenced
//     (eventlog.OwnerLost), the turn stops where it is, with no error
//     chunk, no assistant message, no outcome, no stash and no fiber end,
//     whatever was refused (a chunk, a stash, a tool call's op) and even if
//     the next write would pass (a lease renewed late). The new owner's
//     recovery continues the turn and records its one outcome
//     (TestNotOwnerWritesNothing, mid-turn and mid-tool-call, on a real
//     fenced log).
//   - No failure leaves a turn streaming: a turn fiber that fails (outside
//     shutdown, and while this node owns the agent) first ends its turn
//     with an error chunk and turn.failed;
//     if even that cannot be written, the turns view marks the turn
//     Orphaned when fiber.failed (or abandoned) lands, and the next Send
//     ends it the same way instead of refusing with ErrTurnActive.
//   - Nothing is half-written for being too large: chunks are split; a
//     user message with its request body and tools too large for one event
//     (turn.started carries all three) is refused by Send (ErrTooLarge)
//     before anything is appended. An assistant message (message.appended
//     or message.updated) too large for one event is split into
//     message.part events appended as one atomic batch; the messages view
//     applies the whole event when the last part arrives (a set cut short
//     is never applied) and keeps a large message's JSON in 128 KiB pieces,
//     so a rebuild and a compaction snapshot hold it whole. Only an answer
//     over MaxMessageParts events ends its turn with an error chunk saying
//     so (not finish) and turn.failed.
//   - Chunk retention purges only ended streams; a turn still streaming
//     loses chunks only to the chunks stream's safety cap
//     (eventlog.Config.ChunkSafetyAge). A turn recovered (or ended) after
//     that removed the start of its stream fails with ErrChunksExpired (an error chunk and
//     turn.failed); it is not continued from, nor stored as, a truncated
//     partial.
//   - A turn records exactly one outcome, and a turn's assistant message is
//     stored once (message.appended, or one whole set of its message.part
//     events, or the message of its turn.completed at record format 8,
//     then message.updated by id); the messages view ignores a message id
//     it already has.
//   - A turn.completed of record format 8 reads as the message.appended
//     and usage.recorded it replaces, then itself, in every view (SplitEnd
//     for readers of the log alone): a view is the same whichever format
//     stored the turn (TestEndRecordsByFormat). It is written only while
//     Config.EndRecordsWritable says so, in agentd once every live node
//     reads it; else the old chain.
//   - A turn.completed of record format 11 carries its fiber's end
//     (fiber.CompleteIn; eventlog.Event.Completes): every view reads it as
//     itself then the fiber.completed it replaces (fiber.Records; SplitEnd
//     leaves it out), so a view is the same at formats 10 and 11, and
//     the turn's outcome and its fiber's end are stored together or not at
//     all (TestInlineEndsByFormat, TestTurnEndCrash). It is written only
//     while Config.InlineEndsWritable says so, in agentd once every live
//     node reads it.
//   - A stash never claims more than the stream holds: the chunks are
//     flushed before each stash, or beside it for the stash of a step's
//     usage before its tools (stashUsage, not for a provider that resumes
//     by response id), which keeps the stream position of the stash before
//     it; a recovered turn counts that usage only while the stream holds
//     the step's tool calls (TestToolUsageStashedChunksLost).
//   - With a Limiter, every model call waits in it first (Status shows
//     ModelWait meanwhile), and a rate-limited answer (llm.RateLimited)
//     is retried through it, after the pause it sets for its
//     Retry-After, counting no attempt: the provider's limit is not the
//     turn's failure. Without one, such a retry waits at least the
//     Retry-After, as an attempt.
//   - Each recovery, and each retry after a retryable error, that finds no
//     new chunk since the previous one counts one attempt (kept in the
//     stash, stashed before the attempt acts); beyond MaxRecoveryAttempts
//     the turn fails with an error chunk and turn.failed, which clients who
//     reconnect later see. Progress resets the count. Recoveries without
//     progress within AttemptWindow (30 s) of the last counted one are that
//     attempt. The turn's stashes set the fiber's attempt count to its own
//     (fiber.WithAttempts), so the fiber's MaxAttempts and
//     MaxRecoveryAttempts (at most, and by default, the fiber's) are one
//     budget, and progress resets both.
//   - The turn slot (slot.go) is released once, by whoever holds it: the
//     command until its turn.started is stored (or known not to be), and
//     the turn's run (turnRun) from then on, for a started turn and a
//     recovered one alike. A run releases its slot in one place,
//     turnRun.release, deferred by what runs the turn (turnRun.run,
//     recoverTurn), before the fiber ends a failed turn or tells a parent.
//     The one hold kept on purpose is a turn.started whose fate is
//     unknown: the slot stays taken until the agent restarts, so no turn
//     starts beside one that may yet land. A second release, or an owner
//     that ends holding the slot, is a defect that slotMisuse reports
//     (TestSlotReleasedTwiceIsCaught, TestSlotNotReleasedIsCaught,
//     TestRunReleasesItsSlotOnce; every chat test's agent fails on one).
//   - A set "turn" interrupt stops the running turn between deltas, and a
//     recovered turn before it streams; the flag is cleared when the turn
//     ends, and by Send (a stale flag never aborts a new turn). A flag
//     read unset is answered from memory until a flag may have been set
//     (interruptflags.go), and still every set the views applied before a
//     check (SetInterrupt returned, or another process's append was
//     waited for) is seen by that check (TestInterruptSeenByNextCheck).
//     An agent's budget limits read absent (the defaults) before a model
//     call are remembered the same way (budgetlimits.go): every budget.set
//     the views applied before a read is seen by it
//     (TestBudgetLimitsSeenByNextRead).
//   - SetState is compare-and-set: state.set is appended with the agent's
//     last event sequence expected (ExpectSeq) after checking the version,
//     so of two concurrent calls with the same expected version exactly one
//     wins and the other gets ErrVersionConflict; the chatstate view also
//     applies only version = current+1.
//   - Usage counts the first usage.recorded (or turn.completed's usage) of
//     each request id, and a turn's usage.recorded is the sum of every
//     provider call of the turn, recovered or not: a step's call that
//     finished is counted once (its
//     usage is stashed before the step's tools run, and rides on the
//     finish chunk otherwise), and a call cut by a crash or a retryable
//     error counts what the call resuming it reports. Providers that
//     resume the same response (OpenAI Responses, the local model) report
//     the whole response there, so a recovered turn records what the same
//     turn uncut records (TestRecoveredUsageEqualsUninterrupted); Chat
//     Completions and Anthropic continue with a new call, and the cut
//     call, which never reported its usage, is not counted.
//   - A budget's spend (an agent's, its user's, its tenant's: budget.go,
//     budget_shared.go) is a sum over the usage.recorded events of the
//     period, never a counter: a tenant's counts each agent's own calls
//     once (TestTenantBudgetCountsEveryAgent), read from totals that
//     equal the sum of the agents' rows through compactions, deletions
//     and rebuilds (TestTenantTotalsFollowRows), a user's its agents'
//     together, and past a hard limit of any of them every agent it
//     counts is refused with 402 (TestUserBudgetSharedByAgents).
//   - Hidden messages reach the provider and never Store.Messages.
//   - Store.History is what decoding every row of the conversation gives,
//     byte for byte: its cache reuses a decoded message only for a row
//     whose bytes are the ones it was decoded from (historycache.go),
//     whatever changed the rows (TestHistoryCacheEqualsDecoding).
//   - A completed tool call never runs again: its result is recorded
//     (op.completed) before its output chunk is written, and a resumed turn
//     replays it. An Unsafe call cut off by a crash is never run again
//     silently; the model is told its outcome is unknown.
//   - A tool call's op.started is durable before the tool runs. At record
//     format 9 (Config.AnnouncedStepsWritable, in agentd once every live
//     node reads it) the stash of the step's usage carries it for the
//     step's one call of an Idempotent tool (fiber.AnnounceStep): that
//     call awaits two rounds of writes (its input with the stash, its
//     result), as a bare fiber.Step, and one cut by a crash before or
//     while it ran runs again with the same idempotency key. An Unsafe
//     call's op.started stays a write of its own after the stash, so a
//     crash between them leaves it not started and it runs once, never
//     reported as maybe executed for nothing (TestToolCrashPoints,
//     TestAnnouncedStepsByFormat, TestAnnouncedStepCrash).
//   - A call that needs approval never runs without it, and an answer
//     runs it at most once: a second answer is ErrAlreadyAnswered.
//   - Bad tool calls never crash a turn: arguments that are not JSON
//     (tool-input-error), input the schema refuses, an unknown tool and an
//     output larger than the tool's limit (256 KiB) reach the model as tool
//     errors.
//   - A sub-agent call runs its child's turn at most once, and its output
//     is written once: the child turn's request id is derived from the
//     call, the link is recorded before the wait, and the output after the
//     link's end (TestSubagentCrashPoints kills the parent at each point of
//     a step with two children). Every started link ends: with the child's
//     outcome, or cancelled when the parent's turn ends first. A read of
//     the child's turn on its owner that fails (a 503 while its partition
//     moves, a timeout) is no outcome: it is tried again, and the parent's
//     turn goes on waiting (TestSubagentOwnerReadFails).
//   - A call that would close a cycle (its child is in the chain of
//     callers) or make a chain deeper than Config.MaxDepth starts no
//     child turn: the parent gets a tool error ("cycle", "depth") and its
//     turn goes on (TestSubagentRefused). A child's Send refuses a parent
//     whose chain holds the child (ErrInvalidMessage), however the call
//     reached it.
//   - A turn awaiting its children runs nothing and pins nothing: no
//     keepalive reference, no TurnLimiter admission; its agent may be
//     deactivated and it resumes when a child's notice (or a restart)
//     activates the agent again (TestSubagentParentDeactivated).
//   - A turn's stored tools (turn.started's tools) that do not decode are
//     corrupt data, with one rule wherever they are needed: running a turn
//     and recovering it (before the recovery hook) fail the turn with an
//     error chunk and turn.failed, and ContinueLastTurn of it refuses; the
//     error matches eventlog.ErrCorrupt. A turn never goes on without the
//     tools it was started with.
//
// # Usage
//
//	store, prs, err := chat.OpenStore(lg) // once per process; run prs
//	batcher := lg.NewBatcher(eventlog.BatcherConfig{}) // go batcher.Run(ctx)
//
//	var agent *chat.Agent
//	runner, err := fiber.New(fiber.Config{Log: lg, Table: table, Agent: "a1", KeepAlive: pool.For("a1"),
//		Hooks: fiber.Hooks{OnFiberRecovered: func(ctx context.Context, rec fiber.Recovered) error {
//			if handled, err := agent.OnFiberRecovered(ctx, rec); handled {
//				return err
//			}
//			return nil // other fibers of the agent
//		}}})
//	agent, err = chat.New(chat.Config{Agent: "a1", Log: lg, Store: store, Batcher: batcher,
//		MaxPayload: lg.MaxPayload(), Fibers: runner, Provider: llm.NewLocal(llm.LocalConfig{})})
//	err = runner.Recover(ctx) // on activation
//
//	turn, err := agent.Send(ctx, chat.SendRequest{Text: "hello", RequestID: reqID}) // reqID: minted at the edge
//	// the same Send again (a retry) returns the same turn
//	// clients follow <prefix>.chunk.a1.<turn.StreamID>
//	ok, err := agent.Cancel(ctx)
//	msgs, next, err := agent.Messages(chat.Page{Limit: 50})
package chat
