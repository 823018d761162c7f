package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/seedctl/seedctl/tokenizer"
)

// ---- /v1/completions ------------------------------------------------------

type completionRequest struct {
	Model                  string          `json:"model"`
	Prompt                 json.RawMessage `json:"prompt"`
	Logprobs               *int            `json:"logprobs"`
	Echo                   bool            `json:"echo"`
	ReturnTokensAsTokenIDs bool            `json:"return_tokens_as_token_ids"`
	PromptLogprobs         *int            `json:"prompt_logprobs"`
	genParams
}

// countPrompts counts the prompts of a prompt that is a list of lists or of
// strings (a string or a flat list of token ids is one), stopping at
// limit: the prompts of a hostile body are never all decoded.
func countPrompts(raw json.RawMessage, limit int) int {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if t, err := dec.Token(); err != nil || t != json.Delim('[') {
		return 1
	}
	if !dec.More() {
		return 0
	}
	first, err := dec.Token()
	if err != nil {
		return 1
	}
	if _, isStr := first.(string); !isStr && first != json.Delim('[') {
		return 1 // a flat list of token ids
	}
	if first == json.Delim('[') {
		// Skip the rest of the first prompt.
		for depth := 1; depth > 0; {
			t, err := dec.Token()
			if err != nil {
				return 1
			}
			switch t {
			case json.Delim('['):
				depth++
			case json.Delim(']'):
				depth--
			}
		}
	}
	n := 1
	for dec.More() && n < limit {
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return n
		}
		n++
	}
	return n
}

// scanJSON walks b once without decoding or allocating: structure sees
// each byte outside strings with the nesting depth there (an opening
// bracket counts itself), str each string's span [start, end] (its
// quotes included) and the depth it sits at; either stops the walk by
// returning false.
func scanJSON(b []byte, structure func(i int, c byte, depth int) bool, str func(start, end, depth int) bool) {
	depth, inString, escaped, start := 0, false, false, 0
	for i, c := range b {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
				if str != nil && !str(start, i, depth) {
					return
				}
			}
			continue
		case c == '"':
			inString, start = true, i
			continue
		case c == '[' || c == '{':
			depth++
		}
		if structure != nil && !structure(i, c, depth) {
			return
		}
		if c == ']' || c == '}' {
			depth--
		}
	}
}

// countElements counts the elements of a JSON array (0 for anything
// else), stopping at limit, without decoding them or allocating: b is
// valid JSON (json.Unmarshal checks the whole body before it calls an
// UnmarshalJSON method).
func countElements(b []byte, limit int) int {
	b = bytes.TrimSpace(b)
	if len(b) < 2 || b[0] != '[' {
		return 0
	}
	if len(bytes.TrimSpace(b[1:len(b)-1])) == 0 {
		return 0
	}
	n := 1
	scanJSON(b, func(_ int, c byte, depth int) bool {
		if c == ',' && depth == 1 {
			n++
		}
		return n < limit
	}, nil)
	return n
}

// parsePrompt accepts a string, a list of strings, a list of token ids or a
// list of lists of token ids; at most maxPrompts of them.
//
// A string prompt longer than maxTextBytes is refused before it is
// encoded (maxPromptBytes: it cannot fit the context).
func parsePrompt(raw json.RawMessage, tok *tokenizer.Tokenizer, vocab, maxPrompts, maxTextBytes int) ([][]int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, bad("prompt", "prompt is required")
	}
	if n := countPrompts(raw, maxPrompts+1); n > maxPrompts {
		return nil, bad("prompt", "more than %d prompts in one request", maxPrompts)
	}
	var one string
	var strs []string
	var ids []int
	var batches [][]int
	var out [][]int
	tooLong := func(i int, s string) error {
		if maxTextBytes > 0 && len(s) > maxTextBytes {
			return bad("prompt", "prompt %d has %d bytes of text, more than this model's context can hold (it would encode to more tokens than the context; at most %d bytes are read)", i, len(s), maxTextBytes)
		}
		return nil
	}
	switch {
	case json.Unmarshal(raw, &one) == nil:
		if err := tooLong(0, one); err != nil {
			return nil, err
		}
		e, err := tok.Encode(one)
		if err != nil {
			return nil, bad("prompt", "encoding the prompt: %v", err)
		}
		out = [][]int{e}
	case json.Unmarshal(raw, &strs) == nil && len(strs) > 0:
		for i, s := range strs {
			if err := tooLong(i, s); err != nil {
				return nil, err
			}
			e, err := tok.Encode(s)
			if err != nil {
				return nil, bad("prompt", "encoding the prompt: %v", err)
			}
			out = append(out, e)
		}
	case json.Unmarshal(raw, &ids) == nil && len(ids) > 0:
		out = [][]int{ids}
	case json.Unmarshal(raw, &batches) == nil && len(batches) > 0:
		out = batches
	default:
		return nil, bad("prompt", "prompt must be a string, a list of strings, a list of token ids or a list of lists of token ids")
	}
	for i, p := range out {
		if len(p) == 0 {
			return nil, bad("prompt", "prompt %d is empty", i)
		}
		for _, id := range p {
			if id < 0 || id >= vocab {
				return nil, bad("prompt", "token id %d in prompt %d is outside the vocabulary (%d)", id, i, vocab)
			}
		}
	}
	return out, nil
}

// checkLength refuses prompts that, with maxTokens more, exceed the
// context (compared without the sum, which a huge max_tokens overflows).
func checkLength(prompts [][]int, maxTokens, maxLen int) error {
	for _, p := range prompts {
		if len(p) > maxLen || maxTokens > maxLen-len(p) {
			if maxTokens > maxLen {
				// The sum could overflow into a negative count.
				return bad("max_tokens", "This model's maximum context length is %d tokens. However, you requested %d tokens in the completion alone (%d in the prompt).",
					maxLen, maxTokens, len(p))
			}
			return bad("max_tokens", "This model's maximum context length is %d tokens. However, you requested %d tokens (%d in the prompt, %d in the completion).",
				maxLen, len(p)+maxTokens, len(p), maxTokens)
		}
	}
	return nil
}

type completionLogprobs struct {
	TextOffset    []int                `json:"text_offset"`
	TokenLogprobs []*float64           `json:"token_logprobs"`
	Tokens        []string             `json:"tokens"`
	TopLogprobs   []map[string]float64 `json:"top_logprobs"`
}

// add appends a token; text_offset counts characters (code points) of the
// text so far, as the OpenAI API and vLLM do, not bytes.
func (l *completionLogprobs) add(text string, lp *float64, top map[string]float64) {
	off := 0
	if n := len(l.Tokens); n > 0 {
		off = l.TextOffset[n-1] + utf8.RuneCountInString(l.Tokens[n-1])
	}
	l.TextOffset = append(l.TextOffset, off)
	l.Tokens = append(l.Tokens, text)
	l.TokenLogprobs = append(l.TokenLogprobs, lp)
	l.TopLogprobs = append(l.TopLogprobs, top)
}

// completionLimits are what a completions request is checked against.
type completionLimits struct {
	tok       *tokenizer.Tokenizer
	vocab     int
	maxLen    int
	sequences int // prompts × n
	// maxTextBytes refuses longer string prompts unencoded (0: no bound).
	maxTextBytes int
}

// maxPromptBytes bounds the text of a prompt or a conversation that could
// still fit the context: every token decodes to at most MaxTokenBytes
// bytes, so a longer text encodes to more than maxLen tokens. The factor
// 4 leaves room for normalisation (NFC and the like shorten some texts)
// and for text a chat template drops.
func (sn *snapshot) maxPromptBytes() int {
	return 4 * sn.tok.MaxTokenBytes() * sn.maxLen
}

// validateCompletion checks a decoded completions request and returns its
// prompts and generation parameters; every error is a 4xx naming the field.
func validateCompletion(req *completionRequest, lim completionLimits) ([][]int, parsedGen, error) {
	var p parsedGen
	if req.PromptLogprobs != nil {
		return nil, p, bad("prompt_logprobs", "prompt_logprobs is not supported; use echo with max_tokens 0 and logprobs 0")
	}
	if req.Logprobs != nil && (*req.Logprobs < 0 || *req.Logprobs > 20) {
		return nil, p, bad("logprobs", "logprobs must be in [0, 20], got %d", *req.Logprobs)
	}
	prompts, err := parsePrompt(req.Prompt, lim.tok, lim.vocab, lim.sequences, lim.maxTextBytes)
	if err != nil {
		return nil, p, err
	}
	if p, err = req.genParams.parse(16, lim.vocab); err != nil {
		return nil, p, err
	}
	if len(prompts)*p.n > lim.sequences {
		return nil, p, bad("n", "%d prompts × n=%d is more than the %d sequences one request may ask for", len(prompts), p.n, lim.sequences)
	}
	if err := checkLength(prompts, p.maxTokens, lim.maxLen); err != nil {
		return nil, p, err
	}
	if req.Stream && req.Echo {
		return nil, p, bad("echo", "echo is not supported with stream")
	}
	return prompts, p, nil
}

func (s *Server) completions(w http.ResponseWriter, r *http.Request) {
	var req completionRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, err)
		return
	}
	if err := s.checkModel(req.Model); err != nil {
		s.fail(w, err)
		return
	}
	snap := s.eng.snap()
	prompts, p, err := validateCompletion(&req, completionLimits{tok: snap.tok, vocab: snap.model.Config().VocabSize, maxLen: snap.maxLen, sequences: s.eng.maxSequences(), maxTextBytes: snap.maxPromptBytes()})
	if err != nil {
		s.fail(w, err)
		return
	}
	top := 0
	if req.Logprobs != nil {
		top = *req.Logprobs
	}
	id := fmt.Sprintf("cmpl-%d", s.seq.Add(1))
	created := time.Now().Unix()

	var promptLP [][]float64
	if req.Echo && req.Logprobs != nil {
		promptLP, snap, err = s.eng.score(r.Context(), prompts)
		if err != nil {
			s.fail(w, err)
			return
		}
	}
	if req.Stream {
		s.streamCompletions(w, r, id, created, prompts, p, top, req)
		return
	}
	var results []choiceResult
	if p.maxTokens > 0 || !req.Echo {
		results, err = s.generate(r.Context(), prompts, p, top, nil)
		if err != nil {
			s.fail(w, err)
			return
		}
	} else {
		for i, pr := range prompts {
			for c := 0; c < p.n; c++ {
				results = append(results, choiceResult{index: i*p.n + c, prompt: pr, finish: "length", snap: snap})
			}
		}
	}
	choices := make([]map[string]any, len(results))
	for i, res := range results {
		rs := res.snap
		if rs == nil {
			rs = snap
		}
		text := truncateAtStop(decodeText(rs.tok, genIDs(res.gen), p.skipSpecial, true), p.stops)
		var lps *completionLogprobs
		if req.Logprobs != nil {
			lps = &completionLogprobs{}
			if req.Echo {
				plp := promptLP[i/p.n]
				for k, tid := range res.prompt {
					t := tokenText(rs.tok, tid, req.ReturnTokensAsTokenIDs)
					if k == 0 {
						lps.add(t, nil, nil)
						continue
					}
					v := plp[k]
					lps.add(t, &v, map[string]float64{t: v})
				}
			}
			for _, g := range res.gen {
				v := g.LogProb
				t := tokenText(rs.tok, g.ID, req.ReturnTokensAsTokenIDs)
				var topm map[string]float64
				if top > 0 {
					topm = map[string]float64{}
					for _, a := range g.Top {
						topm[tokenText(rs.tok, a.ID, req.ReturnTokensAsTokenIDs)] = a.LogProb
					}
				}
				lps.add(t, &v, topm)
			}
		}
		if req.Echo {
			b, _ := rs.tok.DecodeBytes(res.prompt, tokenizer.DecodeOptions{})
			text = string(b) + text
		}
		ch := map[string]any{"index": res.index, "text": text, "logprobs": nil, "finish_reason": res.finish, "stop_reason": nil}
		if lps != nil {
			ch["logprobs"] = lps
		}
		choices[i] = ch
	}
	writeJSON(w, map[string]any{
		"id": id, "object": "text_completion", "created": created, "model": s.name,
		"choices": choices, "usage": usage(results, p.n),
	})
}

// ---- server-sent events -------------------------------------------------------

type sse struct {
	w http.ResponseWriter
	f http.Flusher
}

func newSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("Connection", "keep-alive")
	f, _ := w.(http.Flusher)
	return &sse{w: w, f: f}
}

func (s *sse) send(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	if _, err := fmt.Fprintf(s.w, "data: %s\n\n", b); err != nil {
		return err
	}
	if s.f != nil {
		s.f.Flush()
	}
	return nil
}

func (s *sse) done() {
	fmt.Fprint(s.w, "data: [DONE]\n\n")
	if s.f != nil {
		s.f.Flush()
	}
}

// textStream turns each choice's tokens into text deltas, holding back
// incomplete characters and anything that could be the start of a stop string.
type textStream struct {
	tok  *tokenizer.Tokenizer
	sent map[int]int
}

func (t *textStream) delta(idx int, r *choiceResult, stops []string, skipSpecial, final bool) string {
	if t.sent == nil {
		t.sent = map[int]int{}
	}
	text := truncateAtStop(decodeText(t.tok, genIDs(r.gen), skipSpecial, final), stops)
	upto := len(text)
	if !final {
		for _, s := range stops {
			for k := len(s) - 1; k > 0; k-- {
				if strings.HasSuffix(text, s[:k]) {
					upto = min(upto, len(text)-k)
					break
				}
			}
		}
	}
	from := t.sent[idx]
	if upto <= from {
		return ""
	}
	t.sent[idx] = upto
	return text[from:upto]
}

func (s *Server) streamCompletions(w http.ResponseWriter, r *http.Request, id string, created int64, prompts [][]int, p parsedGen, top int, req completionRequest) {
	out := newSSE(w)
	snap := s.eng.snap()
	ts := &textStream{tok: snap.tok}
	results, err := s.generate(r.Context(), prompts, p, top, func(idx int, ev genEvent, res *choiceResult) error {
		ch := map[string]any{"index": idx, "text": ts.delta(idx, res, p.stops, p.skipSpecial, ev.done), "logprobs": nil, "finish_reason": nil}
		if ev.tok != nil && req.Logprobs != nil {
			v := ev.tok.LogProb
			lps := &completionLogprobs{}
			lps.add(tokenText(snap.tok, ev.tok.ID, req.ReturnTokensAsTokenIDs), &v, nil)
			ch["logprobs"] = lps
		}
		if ev.done {
			ch["finish_reason"] = res.finish
		}
		return out.send(map[string]any{"id": id, "object": "text_completion", "created": created, "model": s.name, "choices": []any{ch}})
	})
	if err != nil {
		s.log.Warn().Err(err).Msg("stream ended early")
		out.send(map[string]any{"error": apiError{Message: clientError(err), Type: "internal_error", Code: 500}})
	} else if p.includeUsage {
		out.send(map[string]any{"id": id, "object": "text_completion", "created": created, "model": s.name, "choices": []any{}, "usage": usage(results, p.n)})
	}
	out.done()
}

// ---- /v1/chat/completions --------------------------------------------------

type chatMessage struct {
	Role             string          `json:"role"`
	Content          json.RawMessage `json:"content"`
	ReasoningContent string          `json:"reasoning_content"`
}

// maxMessages bounds a conversation as it is decoded, before the context
// (each message renders to at least one token) refuses the rest: a body
// of a million one-word messages is not decoded into a million structs.
const maxMessages = 1 << 16

// chatMessages is a conversation of at most maxMessages messages.
type chatMessages []chatMessage

func (m *chatMessages) UnmarshalJSON(b []byte) error {
	if n := countElements(b, maxMessages+1); n > maxMessages {
		return bad("messages", "more than %d messages in one conversation", maxMessages)
	}
	return json.Unmarshal(b, (*[]chatMessage)(m))
}

type chatRequest struct {
	Model               string         `json:"model"`
	Messages            chatMessages   `json:"messages"`
	Logprobs            bool           `json:"logprobs"`
	TopLogprobs         *int           `json:"top_logprobs"`
	ChatTemplateKwargs  map[string]any `json:"chat_template_kwargs"`
	AddGenerationPrompt *bool          `json:"add_generation_prompt"`
	genParams
}

// messageText accepts content as a string or a list of text parts.
func messageText(raw json.RawMessage, i int) (string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", bad(fmt.Sprintf("messages[%d].content", i), "content must be a string or a list of text parts")
	}
	var b strings.Builder
	for k, p := range parts {
		if p.Type != "text" {
			return "", bad(fmt.Sprintf("messages[%d].content[%d].type", i, k), "only text content is supported, got %q", p.Type)
		}
		b.WriteString(p.Text)
	}
	return b.String(), nil
}

type chatTokenLogprob struct {
	Token       string             `json:"token"`
	Logprob     float64            `json:"logprob"`
	Bytes       []int              `json:"bytes"`
	TopLogprobs []chatTokenLogprob `json:"top_logprobs"`
}

func chatLP(tok *tokenizer.Tokenizer, id int, lp float64) chatTokenLogprob {
	b, _ := tok.DecodeBytes([]int{id}, tokenizer.DecodeOptions{})
	bs := make([]int, len(b))
	for i, c := range b {
		bs[i] = int(c)
	}
	return chatTokenLogprob{Token: strings.ToValidUTF8(string(b), "\uFFFD"), Logprob: lp, Bytes: bs, TopLogprobs: []chatTokenLogprob{}}
}

func (s *Server) chat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := decodeBody(r, &req); err != nil {
		s.fail(w, err)
		return
	}
	if err := s.checkModel(req.Model); err != nil {
		s.fail(w, err)
		return
	}
	if len(req.Messages) == 0 {
		s.fail(w, bad("messages", "messages must not be empty"))
		return
	}
	snap := s.eng.snap()
	if snap.chat == nil {
		s.fail(w, bad("messages", "this model has no chat template; use /v1/completions"))
		return
	}
	top := 0
	if req.TopLogprobs != nil {
		if *req.TopLogprobs < 0 || *req.TopLogprobs > 20 {
			s.fail(w, bad("top_logprobs", "top_logprobs must be in [0, 20], got %d", *req.TopLogprobs))
			return
		}
		if !req.Logprobs {
			s.fail(w, bad("top_logprobs", "top_logprobs needs logprobs: true"))
			return
		}
		top = *req.TopLogprobs
	}
	// Work that cannot fit the context is refused before it is built: a
	// message renders to at least one token, and its text to at least
	// len/MaxTokenBytes (maxPromptBytes).
	if len(req.Messages) > snap.maxLen {
		s.fail(w, bad("messages", "%d messages: more than this model's maximum context length of %d tokens can hold", len(req.Messages), snap.maxLen))
		return
	}
	limit, total := snap.maxPromptBytes(), 0
	msgs := make([]tokenizer.Message, len(req.Messages))
	for i, m := range req.Messages {
		switch m.Role {
		case "system", "user", "assistant", "tool":
		case "developer":
			// The OpenAI API's newer name for system instructions.
			m.Role = "system"
		default:
			s.fail(w, bad(fmt.Sprintf("messages[%d].role", i), "unknown role %q", m.Role))
			return
		}
		text, err := messageText(m.Content, i)
		if err != nil {
			s.fail(w, err)
			return
		}
		if total += len(text) + len(m.ReasoningContent); total > limit {
			s.fail(w, bad("messages", "the messages hold more than %d bytes of text (at messages[%d]): more than this model's maximum context length of %d tokens can hold", limit, i, snap.maxLen))
			return
		}
		msgs[i] = tokenizer.Message{Role: m.Role, Content: text, ReasoningContent: m.ReasoningContent}
	}
	agp := req.AddGenerationPrompt == nil || *req.AddGenerationPrompt
	rendered, err := snap.chat.Render(msgs, tokenizer.ChatOptions{AddGenerationPrompt: agp, Extra: req.ChatTemplateKwargs})
	if err != nil {
		s.fail(w, bad("messages", "%v", err))
		return
	}
	ids, err := snap.tok.Encode(rendered)
	if err != nil || len(ids) == 0 {
		s.fail(w, bad("messages", "encoding the rendered conversation: %v", err))
		return
	}
	vocab := snap.model.Config().VocabSize
	if len(ids) >= snap.maxLen {
		s.fail(w, bad("messages", "This model's maximum context length is %d tokens. However, your messages resulted in %d tokens, which leaves no room for a completion.", snap.maxLen, len(ids)))
		return
	}
	p, err := req.genParams.parse(snap.maxLen-len(ids), vocab)
	if err != nil {
		s.fail(w, err)
		return
	}
	prompts := [][]int{ids}
	if err := checkLength(prompts, p.maxTokens, snap.maxLen); err != nil {
		s.fail(w, err)
		return
	}
	id := fmt.Sprintf("chatcmpl-%d", s.seq.Add(1))
	created := time.Now().Unix()
	if req.Stream {
		s.streamChat(w, r, id, created, prompts, p, top, req.Logprobs, snap)
		return
	}
	results, err := s.generate(r.Context(), prompts, p, top, nil)
	if err != nil {
		s.fail(w, err)
		return
	}
	choices := make([]map[string]any, len(results))
	for i, res := range results {
		rs := res.snap
		text := truncateAtStop(decodeText(rs.tok, genIDs(res.gen), p.skipSpecial, true), p.stops)
		ch := map[string]any{"index": res.index, "message": map[string]any{"role": "assistant", "content": text}, "logprobs": nil, "finish_reason": res.finish}
		if req.Logprobs {
			content := make([]chatTokenLogprob, len(res.gen))
			for k, g := range res.gen {
				content[k] = chatLP(rs.tok, g.ID, g.LogProb)
				for _, a := range g.Top {
					content[k].TopLogprobs = append(content[k].TopLogprobs, chatLP(rs.tok, a.ID, a.LogProb))
				}
			}
			ch["logprobs"] = map[string]any{"content": content}
		}
		choices[i] = ch
	}
	writeJSON(w, map[string]any{
		"id": id, "object": "chat.completion", "created": created, "model": s.name,
		"choices": choices, "usage": usage(results, p.n),
	})
}

func (s *Server) streamChat(w http.ResponseWriter, r *http.Request, id string, created int64, prompts [][]int, p parsedGen, top int, logprobs bool, snap *snapshot) {
	out := newSSE(w)
	ts := &textStream{tok: snap.tok}
	chunk := func(choices ...any) error {
		return out.send(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": s.name, "choices": choices})
	}
	for c := 0; c < p.n; c++ {
		if err := chunk(map[string]any{"index": c, "delta": map[string]any{"role": "assistant", "content": ""}, "logprobs": nil, "finish_reason": nil}); err != nil {
			return
		}
	}
	results, err := s.generate(r.Context(), prompts, p, top, func(idx int, ev genEvent, res *choiceResult) error {
		ch := map[string]any{"index": idx, "delta": map[string]any{}, "logprobs": nil, "finish_reason": nil}
		if d := ts.delta(idx, res, p.stops, p.skipSpecial, ev.done); d != "" {
			ch["delta"] = map[string]any{"content": d}
		}
		if ev.tok != nil && logprobs {
			lp := chatLP(snap.tok, ev.tok.ID, ev.tok.LogProb)
			for _, a := range ev.tok.Top {
				lp.TopLogprobs = append(lp.TopLogprobs, chatLP(snap.tok, a.ID, a.LogProb))
			}
			ch["logprobs"] = map[string]any{"content": []chatTokenLogprob{lp}}
		}
		if ev.done {
			ch["finish_reason"] = res.finish
		}
		return chunk(ch)
	})
	if err != nil {
		s.log.Warn().Err(err).Msg("stream ended early")
		out.send(map[string]any{"error": apiError{Message: clientError(err), Type: "internal_error", Code: 500}})
	} else if p.includeUsage {
		out.send(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": s.name, "choices": []any{}, "usage": usage(results, p.n)})
	}
	out.done()
}
