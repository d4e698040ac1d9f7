// A stock Vercel AI SDK chat client against agentd's HTTP gateway.
//
//	AGENTD_URL=http://127.0.0.1:8080 node chat.mjs <5|6|7> [prefix]
//
// It drives the SDK's own client machinery: AbstractChat (the core of
// useChat, here with a tiny ChatState) over DefaultChatTransport, so every
// chunk the gateway sends goes through the SDK's SSE parsing, its chunk
// schema and its message assembly. Each flow uses its own chat id
// (<prefix>-<flow>) and checks the messages the client ends with, and that
// they match what the gateway stored (GET /v1/chat/{id}/messages).
//
// Flows: server tool, client tool (addToolResult), approval
// (addToolApprovalResponse; AI SDK 6 and later), resuming a turn while
// a tool runs (resumeStream on a new client), Stop (the stop endpoint,
// the partial answer kept), a sub-agent (the
// data-subagent part, and the child's stream followed by another client),
// regenerate and an edit of an earlier message (sending the whole
// conversation, and only the new message), and (AI SDK 7) a history of
// more than 3 MB sent whole. FLOWS=a,b runs only those. It prints one line per flow
// and exits non-zero when one failed. The caller checks what the tools
// did on the server (the note's line in <data>/notes.txt).

const version = process.argv[2];
const prefix = process.argv[3] ?? `ai${version}`;
const base = process.env.AGENTD_URL;
if (!['5', '6', '7'].includes(version) || !base) {
	console.error('usage: AGENTD_URL=http://host:port node chat.mjs <5|6|7> [prefix]');
	process.exit(2);
}
const ai = await import(`ai${version}`);
const hasApproval = typeof ai.lastAssistantMessageIsCompleteWithApprovalResponses === 'function';

// State is a ChatState kept in plain fields, as useChat keeps it in React
// state; waiters are woken on every change.
class State {
	#status = 'ready';
	#error = undefined;
	#messages;
	#waiters = new Set();

	constructor(messages = []) {
		this.#messages = messages.map((m) => structuredClone(m));
	}
	get status() { return this.#status; }
	set status(s) { this.#status = s; this.#changed(); }
	get error() { return this.#error; }
	set error(e) { this.#error = e; this.#changed(); }
	get messages() { return this.#messages; }
	set messages(ms) { this.#messages = [...ms]; this.#changed(); }
	pushMessage(m) { this.#messages = this.#messages.concat(structuredClone(m)); this.#changed(); }
	popMessage() { this.#messages = this.#messages.slice(0, -1); this.#changed(); }
	replaceMessage(i, m) {
		this.#messages = [...this.#messages.slice(0, i), structuredClone(m), ...this.#messages.slice(i + 1)];
		this.#changed();
	}
	snapshot(x) { return structuredClone(x); }

	// #changed wakes the waiters after the current job: AbstractChat sets
	// status and error one after the other.
	#changed() {
		queueMicrotask(() => {
			for (const w of this.#waiters) w();
		});
	}
	// until resolves once pred() holds, checked on every change.
	until(what, pred, ms = 20000) {
		return new Promise((resolve, reject) => {
			const check = () => {
				let ok;
				try {
					if (this.#status === 'error') {
						throw new Error(`the SDK failed while waiting for ${what}: ${this.#error?.stack ?? this.#error}`);
					}
					ok = pred();
				} catch (e) {
					done();
					reject(e);
					return;
				}
				if (ok) {
					done();
					resolve();
				}
			};
			const timer = setTimeout(() => {
				done();
				reject(new Error(`timed out after ${ms} ms waiting for ${what}; status ${this.#status}, messages ${JSON.stringify(this.#messages)}`));
			}, ms);
			const done = () => {
				clearTimeout(timer);
				this.#waiters.delete(check);
			};
			this.#waiters.add(check);
			check();
		});
	}
}

// Chat is useChat without React: AbstractChat with a State.
class Chat extends ai.AbstractChat {
	constructor({ messages, ...init }) {
		const state = new State(messages);
		super({ ...init, state });
		this.st = state;
		this.errors = [];
	}
}

const pickTool = { Name: 'pick', Description: 'Picks a number (answered by the client).', Schema: { type: 'object' } };

function newChat(id, { messages = [], tools, auto, onData, after, light } = {}) {
	const transport = new ai.DefaultChatTransport({
		api: `${base}/v1/chat`,
		...(tools ? { body: { tools } } : {}),
		// light: only the new message, as docs/reference.md's useChat setup
		// sends it.
		...(light ? {
			prepareSendMessagesRequest: ({ id, messages, body, trigger, messageId }) => ({
				body: { ...body, id, trigger, messageId, messages: messages.slice(-1) },
			}),
		} : {}),
		// A resume from a cursor: ?after=<cursor> replays the stream after
		// it, live or ended.
		...(after !== undefined ? { prepareReconnectToStreamRequest: ({ id }) => ({ api: `${base}/v1/chat/${id}/stream?after=${after}` }) } : {}),
	});
	const chat = new Chat({
		id,
		messages,
		transport,
		sendAutomaticallyWhen: auto,
		onData,
		onError: (e) => chat.errors.push(e),
	});
	return chat;
}

// stopTurn is docs/reference.md's Stop: POST the stop endpoint, and let
// the stream end by its abort chunk; only a stop that did not reach the
// server aborts the fetch (chat.stop(), a disconnect).
async function stopTurn(chat) {
	const res = await fetch(`${base}/v1/chat/${chat.id}/stop`, { method: 'POST' }).catch(() => null);
	if (!res?.ok) await chat.stop();
}

function fail(msg) {
	throw new Error(msg);
}

function isTool(p, name) {
	return p.type === `tool-${name}` || (p.type === 'dynamic-tool' && p.toolName === name);
}

const textOf = (m) => m.parts.filter((p) => p.type === 'text').map((p) => p.text).join('');
const show = (v) => JSON.stringify(v, null, 1);

function noErrors(chat) {
	if (chat.errors.length > 0 || chat.st.error) {
		fail(`the SDK reported an error: ${chat.errors.map((e) => e.stack ?? e).join('\n') || chat.st.error}`);
	}
}

// assistant returns the conversation's one assistant message, checking
// that it follows the one user message.
function assistant(chat) {
	const ms = chat.messages;
	if (ms.length !== 2 || ms[0].role !== 'user' || ms[1].role !== 'assistant') {
		fail(`want the user message and one assistant message, have ${show(ms)}`);
	}
	return ms[1];
}

// oneTool returns the message's only tool part, of tool name.
function oneTool(m, name) {
	const tools = m.parts.filter((p) => p.type.startsWith('tool-') || p.type === 'dynamic-tool');
	if (tools.length !== 1 || !isTool(tools[0], name)) {
		fail(`want one ${name} tool part, have ${show(m.parts)}`);
	}
	return tools[0];
}

// quotes checks that the message's text quotes the tool's output once.
function quotes(m, name, output) {
	const want = `The ${name} tool returned: ${JSON.stringify(output)}.`;
	const text = textOf(m);
	if (text !== want) {
		fail(`text ${JSON.stringify(text)}, want ${JSON.stringify(want)}`);
	}
}

// sameAsServer checks the client's messages against the gateway's stored
// conversation: same ids, roles and parts (types, tool states, texts, tool
// calls and outputs). A tool part may be static (tool-<name>, what the
// SDK builds from the stream's tool chunks) on one side and dynamic-tool
// on the other (what agentd stores); a text part's state (streaming, done)
// is the client's.
async function sameAsServer(chat) {
	const res = await fetch(`${base}/v1/chat/${chat.id}/messages`);
	if (!res.ok) fail(`GET messages: ${res.status} ${await res.text()}`);
	const { messages: stored } = await res.json();
	const norm = (ms) => ms.map((m) => ({
		id: m.id,
		role: m.role,
		parts: m.parts.filter((p) => p.type !== 'step-start').map((p) => ({
			type: p.type === 'dynamic-tool' ? `tool-${p.toolName}` : p.type,
			state: p.type === 'text' ? undefined : p.state,
			text: p.text,
			toolCallId: p.toolCallId,
			input: p.input,
			output: p.output,
		})),
	}));
	const got = JSON.stringify(norm(chat.messages));
	const want = JSON.stringify(norm(stored));
	if (got !== want) {
		fail(`client messages differ from the stored conversation:\nclient ${show(norm(chat.messages))}\nstored ${show(norm(stored))}`);
	}
}

// ids returns the ids of messages, for comparing conversations.
const ids = (ms) => ms.map((m) => m.id).join(',');

const flows = {
	// Regenerate: the client asks again for the last answer; it ends with
	// the same user messages and a new last assistant message, which is
	// what the server stored in place of the old one.
	async regenerate(id, light) {
		const chat = newChat(id, { light });
		await chat.sendMessage({ text: 'first question' });
		await chat.sendMessage({ text: 'second question' });
		noErrors(chat);
		const before = chat.messages;
		await chat.regenerate();
		noErrors(chat);
		const ms = chat.messages;
		if (ms.length !== 4 || ids(ms.slice(0, 3)) !== ids(before.slice(0, 3)) || ms[3].role !== 'assistant' || ms[3].id === before[3].id) {
			fail(`after regenerate: ${show(ms)}, want the first three of ${show(before)} and a new answer`);
		}
		await sameAsServer(chat);
	},

	// Edit: the client changes its first message (sendMessage with the
	// message's id); the SDK drops everything after it, and so does the
	// server, which answers the edited text under the same id.
	async edit(id, light) {
		const chat = newChat(id, { light });
		await chat.sendMessage({ text: 'one' });
		await chat.sendMessage({ text: 'two' });
		noErrors(chat);
		const first = chat.messages[0];
		await chat.sendMessage({ text: 'one, edited', messageId: first.id });
		noErrors(chat);
		const ms = chat.messages;
		if (ms.length !== 2 || ms[0].id !== first.id || textOf(ms[0]) !== 'one, edited' || ms[1].role !== 'assistant') {
			fail(`after the edit: ${show(ms)}, want the edited message and its answer`);
		}
		await sameAsServer(chat);
	},

	// The same, sending only the new message.
	'regenerate-light': (id) => flows.regenerate(id, true),
	'edit-light': (id) => flows.edit(id, true),

	// Long: a conversation whose history is more than 3 MB (user messages
	// of 450 KiB, under the 512 KiB a new message may take), sent whole in
	// every request, as useChat does: the last request, a body of more
	// than 3 MB, gets its answer, one new assistant message.
	async long(id) {
		const chat = newChat(id);
		const big = (i) => `message ${i} ` + 'x'.repeat(450 << 10);
		for (let i = 0; i < 7; i++) {
			await chat.sendMessage({ text: big(i) });
			noErrors(chat);
		}
		const size = JSON.stringify(chat.messages).length;
		if (size < 3_000_000) fail(`the history is ${size} bytes, want more than 3 MB`);
		const before = chat.messages.length;
		await chat.sendMessage({ text: 'and one more' });
		noErrors(chat);
		const ms = chat.messages;
		if (ms.length !== before + 2 || ms.at(-1).role !== 'assistant' || textOf(ms.at(-1)).length === 0) {
			fail(`after a request of more than ${size} bytes: ${ms.length} messages (want ${before + 2}), last ${show(ms.at(-1))}`);
		}
		await sameAsServer(chat);
	},

	// A server tool: the turn calls clock, agentd runs it, the answer
	// quotes its output.
	async server(id) {
		const chat = newChat(id);
		await chat.sendMessage({ text: '/tool clock {}' });
		noErrors(chat);
		const m = assistant(chat);
		const call = oneTool(m, 'clock');
		if (call.state !== 'output-available' || typeof call.output?.now !== 'string') {
			fail(`clock part ${show(call)}, want output-available with the time`);
		}
		quotes(m, 'clock', call.output);
		await sameAsServer(chat);
	},

	// A client tool: the request offers pick, the turn ends with the call,
	// the client answers with addToolResult and the turn goes on in the
	// same assistant message. It answers as soon as the stream ends, as an
	// onToolCall handler or a quick user would: no pause.
	async client(id) {
		const chat = newChat(id, { tools: [pickTool], auto: ai.lastAssistantMessageIsCompleteWithToolCalls });
		await chat.sendMessage({ text: '/tool pick {"n":1}' });
		noErrors(chat);
		let m = assistant(chat);
		const call = oneTool(m, 'pick');
		if (call.state !== 'input-available' || call.input?.n !== 1) {
			fail(`pick part ${show(call)}, want input-available with {"n":1}`);
		}
		if (chat.status !== 'ready') fail(`status ${chat.status} after the tool call`);
		await chat.addToolResult({ tool: 'pick', toolCallId: call.toolCallId, output: { picked: 7 } });
		await chat.st.until('the answer quoting the pick', () => chat.status === 'ready' && textOf(chat.messages.at(-1)).length > 0 && chat.messages.at(-1).parts.at(-1).state === 'done');
		noErrors(chat);
		m = assistant(chat);
		const done = oneTool(m, 'pick');
		if (done.state !== 'output-available' || done.toolCallId !== call.toolCallId) {
			fail(`pick part ${show(done)}, want output-available`);
		}
		quotes(m, 'pick', { picked: 7 });
		await sameAsServer(chat);
	},

	// An approval: note asks for it, the client approves with
	// addToolApprovalResponse and the note runs.
	async approval(id) {
		const chat = newChat(id, { auto: ai.lastAssistantMessageIsCompleteWithApprovalResponses });
		await chat.sendMessage({ text: '/tool note {"text":"please approve"}' });
		noErrors(chat);
		let m = assistant(chat);
		const call = oneTool(m, 'note');
		if (call.state !== 'approval-requested' || !call.approval?.id) {
			fail(`note part ${show(call)}, want approval-requested`);
		}
		await chat.addToolApprovalResponse({ id: call.approval.id, approved: true });
		await chat.st.until('the answer quoting the note', () => chat.status === 'ready' && textOf(chat.messages.at(-1)).length > 0 && chat.messages.at(-1).parts.at(-1).state === 'done');
		noErrors(chat);
		m = assistant(chat);
		const done = oneTool(m, 'note');
		if (done.state !== 'output-available' || typeof done.output?.lines !== 'number') {
			fail(`note part ${show(done)}, want output-available`);
		}
		quotes(m, 'note', done.output);
		await sameAsServer(chat);
	},

	// A sub-agent: the turn calls the agent tool; while the child answers,
	// the parent's stream carries a data-subagent part naming the child's
	// agent and stream, and the client follows the child's stream with a
	// second stock client (resumeStream from cursor 0 on the child's chat
	// id). The parent's one message ends holding the data part (completed)
	// and the tool's output quoting the child's answer, which is the text
	// the follower saw.
	async subagent(id) {
		const kid = `${id}-kid`;
		let following;
		const follow = async (ref) => {
			const child = newChat(ref.agent, { after: '0' });
			await child.resumeStream();
			noErrors(child);
			return child;
		};
		const chat = newChat(id, {
			onData: (part) => {
				if (part.type === 'data-subagent' && part.data?.status === 'running' && !following) {
					following = follow(part.data);
				}
			},
		});
		await chat.sendMessage({ text: `/agent ${kid} tell me a story` });
		noErrors(chat);
		const m = assistant(chat);
		const call = oneTool(m, 'agent');
		if (call.state !== 'output-available' || call.output?.agent !== kid || call.output?.status !== 'completed' || !call.output?.text) {
			fail(`agent part ${show(call)}, want output-available with the child's answer`);
		}
		const data = m.parts.filter((p) => p.type === 'data-subagent');
		if (data.length !== 1 || data[0].id !== call.toolCallId || data[0].data?.agent !== kid ||
			data[0].data?.streamId !== call.output.streamId || data[0].data?.status !== 'completed') {
			fail(`data-subagent parts ${show(data)}, want one naming ${kid}'s stream, completed`);
		}
		if (!following) fail('onData never saw the data-subagent part while the child ran');
		const child = await following;
		const cm = child.messages.at(-1);
		if (child.messages.length !== 1 || cm?.role !== 'assistant' || cm.id !== call.output.messageId || textOf(cm) !== call.output.text) {
			fail(`the followed child stream gave ${show(child.messages)}, want the child's answer ${JSON.stringify(call.output.text)}`);
		}
		await sameAsServer(chat);
	},

	// Stop: docs/reference.md's stopTurn in the middle of an answer. The
	// stop endpoint ends the turn, whose stream ends with its one abort
	// chunk (the stream's status aborted); the client, whose fetch was not
	// aborted, reads the stream to that end and keeps the partial answer,
	// which is the stored assistant message.
	async stop(id) {
		const chat = newChat(id);
		const sent = chat.sendMessage({ text: 'Tell me a story about a lighthouse.' });
		await chat.st.until('some of the answer', () => {
			const m = chat.messages.at(-1);
			return m?.role === 'assistant' && textOf(m).length > 20;
		});
		await stopTurn(chat);
		await sent;
		noErrors(chat);
		if (chat.status !== 'ready') fail(`status ${chat.status} after the stop`);
		const m = assistant(chat);
		// The streams view follows the chunks a moment after the client
		// read the abort chunk: read it until it shows the end.
		for (let tries = 0; ; tries++) {
			const res = await fetch(`${base}/v1/agents/${id}/streams`);
			const { streams } = await res.json();
			if (streams?.length === 1 && streams[0].status === 'aborted' && streams[0].messageId === m.id) break;
			if (tries === 100 || (streams?.length === 1 && streams[0].status !== 'streaming')) {
				fail(`streams ${show(streams)}, want the one stream of message ${m.id}, aborted`);
			}
			await new Promise((r) => setTimeout(r, 100));
		}
		if (!textOf(m)) fail(`the partial answer is lost: ${show(m)}`);
		// The partial answer is stored just after the abort chunk.
		for (let tries = 0; ; tries++) {
			try {
				await sameAsServer(chat);
				break;
			} catch (e) {
				if (tries >= 50) throw e;
				await new Promise((r) => setTimeout(r, 100));
			}
		}
	},

	// Resume: while the clock tool runs, the client is dropped; a new
	// client with the messages so far resumes the stream and ends with the
	// whole message, each part once.
	async resume(id) {
		const first = newChat(id);
		const sent = first.sendMessage({ text: '/tool clock {"delayMs":1500}' });
		await first.st.until('the clock call', () => {
			const m = first.messages.at(-1);
			return m?.role === 'assistant' && m.parts.some((p) => isTool(p, 'clock') && p.state === 'input-available');
		});
		await first.stop(); // drops the connection; the turn goes on
		await sent;
		const sofar = first.messages;
		if (sofar.at(-1).parts.some((p) => p.type === 'text' || p.state === 'output-available')) {
			fail(`the first client saw the tool finish before it was dropped: ${show(sofar)}`);
		}

		const second = newChat(id, { messages: sofar });
		await second.resumeStream();
		noErrors(second);
		const m = assistant(second);
		if (m.id !== sofar.at(-1).id) fail(`resumed message id ${m.id}, want ${sofar.at(-1).id}`);
		const call = oneTool(m, 'clock');
		if (call.state !== 'output-available' || typeof call.output?.now !== 'string') {
			fail(`clock part ${show(call)}, want output-available`);
		}
		quotes(m, 'clock', call.output);
		const steps = m.parts.filter((p) => p.type === 'step-start').length;
		if (steps !== 2) fail(`${steps} step-start parts, want 2 (the call, the answer): ${show(m.parts)}`);
		await sameAsServer(second);
	},
};

const run = process.env.FLOWS ? process.env.FLOWS.split(',') : ['server', 'client', ...(hasApproval ? ['approval'] : []), 'resume', 'stop', 'subagent', 'regenerate', 'edit', 'regenerate-light', 'edit-light', ...(version === '7' ? ['long'] : [])];
let failed = false;
for (const name of run) {
	const id = `${prefix}-${name}`;
	const t0 = Date.now();
	try {
		await flows[name](id);
	} catch (e) {
		console.log(`FAIL ai@${version} ${name} (chat ${id}): ${e.stack ?? e}`);
		failed = true;
		continue;
	}
	console.log(`ok   ai@${version} ${name} (${Date.now() - t0} ms)`);
}
if (!hasApproval) console.log(`skip ai@${version} approval: this AI SDK has no tool approvals`);
process.exit(failed ? 1 : 0);
