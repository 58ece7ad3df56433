/*
 * llm.h - a client for OpenAI-compatible Chat Completions servers (OpenAI,
 * vLLM, SGLang, llama.cpp, ...), on libcurl.
 *
 * One request per llm_chat(): the caller hands over the conversation already
 * serialised as a JSON array (the agent keeps it serialised so a turn costs
 * an append, not a re-encode) and the tool schemas, also serialised. The
 * client adds model, sampling parameters and tool_choice, POSTs to
 * BASE_URL/chat/completions, retries with exponential backoff on 429, 408,
 * 5xx and connection errors (honouring Retry-After), and parses the reply
 * into a struct llm_reply: the assistant message normalised for the
 * conversation, its tool calls (native `tool_calls`, or text-form
 * `<tool_call>{...}</tool_call>` / fenced JSON for servers without a tool
 * parser), token usage, and logprobs / token ids when the server sent them.
 *
 * Replies are read into a buffer bounded by opts.max_reply (default
 * CA_LIMIT_MODEL_REPLY); a request has a total time limit and an optional
 * stall limit (no byte received for stall_ms), so a reply that never ends is
 * cut.
 *
 * The API key is sent only in the Authorization header and never appears in
 * messages, logs or errors. A client belongs to one thread. The HTTP layer
 * is a struct llm_transport (libcurl by default) so that tests and
 * benchmarks can swap in an in-memory one.
 */
#ifndef CA_LLM_H
#define CA_LLM_H

#include <jansson.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "core/buf.h"
#include "core/err.h"
#include "core/sv.h"

struct llm_opts {
    const char *base_url; /* ".../v1"; "/chat/completions" is appended */
    const char *model;
    const char *api_key;           /* NULL or "": no Authorization header */
    double temperature;            /* < 0: not sent */
    double top_p;                  /* < 0: not sent */
    int64_t max_tokens;            /* <= 0: not sent */
    int64_t seed;                  /* < 0: not sent */
    const char *tool_choice;       /* "auto" (default), "required", "none" */
    bool logprobs;                 /* ask for logprobs ("logprobs": true) */
    bool token_ids;                /* ask for token ids ("return_token_ids": true, vLLM) */
    bool no_text_tools;            /* do not look for text-form tool calls */
    int64_t timeout_ms;            /* one attempt, whole request; default 600000 */
    int64_t connect_timeout_ms;    /* default 10000 */
    int64_t stall_ms;              /* cut a reply when nothing arrives for this long; 0: off. A
                                    * non-streamed reply sends nothing until the completion is done,
                                    * so this must exceed the longest generation. */
    int retries;                   /* attempts after the first; < 0: default 4 */
    int64_t backoff_ms;            /* first wait; doubles per retry; default 1000 */
    int64_t backoff_max_ms;        /* cap on one wait (also on Retry-After); default 60000 */
    size_t max_reply;              /* bytes; 0: CA_LIMIT_MODEL_REPLY */
    int64_t deadline_us;           /* ca_now_us() clock; 0: none. No attempt or wait passes it */
    volatile sig_atomic_t *cancel; /* when set non-zero, the request is abandoned (CA_ETIMEOUT) */
};

/* Defaults above; strings NULL. */
void llm_opts_init(struct llm_opts *o);
/*
 * Fill base_url, api_key and model from the environment where still NULL:
 * CUDA_AGENT_BASE_URL, else OPENAI_BASE_URL; CUDA_AGENT_API_KEY, else
 * OPENAI_API_KEY; CUDA_AGENT_MODEL. The strings are borrowed from environ.
 */
void llm_opts_from_env(struct llm_opts *o);

struct llm_tool_call {
    char *id;        /* the server's id, or "call_<seq>_<i>" when it gave none */
    char *name;      /* "" when missing */
    char *arguments; /* as the model wrote them (a JSON text) */
    json_t *args;    /* parsed object, or NULL when malformed */
    char *error;     /* why the call cannot run (for the model), or NULL */
};

struct llm_reply {
    json_t *message; /* normalised {"role":"assistant","content","tool_calls"?}; owned */
    char *content;   /* the raw content text (NULL when none) */
    struct llm_tool_call *calls;
    size_t ncalls, calls_alloc;
    bool text_form;      /* the calls were parsed from the content */
    char *finish_reason; /* NULL when absent */
    int64_t prompt_tokens, completion_tokens, total_tokens; /* -1 when absent */
    json_t *logprobs;         /* choices[0].logprobs, or NULL; owned */
    json_t *token_ids;        /* choices[0].token_ids, or NULL; owned */
    json_t *prompt_token_ids; /* prompt_token_ids, or NULL; owned */
    json_t *reasoning;        /* reasoning_content, or NULL; owned */
    long status;              /* HTTP status of the last attempt */
    int attempts;
    bool deadline_hit; /* the caller's deadline (o.deadline_us) ended the request, not the
                        * server: an attempt cut by its clipped timeout, or no time left for one */
    int64_t http_us;   /* time in the transport and in waits between attempts; building the
                        * request and parsing the reply are not counted */
};

void llm_reply_init(struct llm_reply *r);
void llm_reply_release(struct llm_reply *r);

enum llm_parse_flags {
    LLM_PARSE_NO_TEXT_TOOLS = 1 << 0, /* ignore text-form tool calls */
};

/*
 * Parse a Chat Completions reply body into *r (initialised by the caller).
 * `seq` numbers synthesised call ids. CA_EPARSE when the body is no reply
 * (with the server's error message when it sent one). Malformed tool calls
 * are not errors: they carry ->error for the model.
 */
int llm_parse_reply(struct sv body, unsigned flags, int64_t seq, struct llm_reply *r,
                    struct ca_err *err) WARN_UNUSED_RESULT;

/*
 * Text-form tool calls in content: `<tool_call>JSON</tool_call>` blocks (the
 * closing tag may be missing at the end), else fenced code blocks whose JSON
 * is {"name", "arguments"|"parameters"} (or an array of them). Appends the
 * calls to r and the content with those blocks removed to *rest. Returns the
 * number of calls found.
 */
size_t llm_text_tool_calls(struct sv content, int64_t seq, struct llm_reply *r, struct buf *rest);

/* The request body for messages_json (a serialised array) and tools_json
 * (serialised array, or empty for none). CA_ETOOBIG past
 * CA_LIMIT_MODEL_REQUEST. */
int llm_build_request(const struct llm_opts *o, struct sv messages_json, struct sv tools_json,
                      struct buf *out) WARN_UNUSED_RESULT;

/* ---- transport ---- */

struct llm_http {
    /* in */
    const char *url;
    const char *body;
    size_t len;
    int64_t timeout_ms;
    /* out */
    struct buf *resp; /* bounded by the caller */
    long status;
    int64_t retry_after_ms; /* -1: none */
};

struct llm_transport {
    void *data;
    /* POST once. 0 with status set, or a negative code: CA_ETIMEOUT,
     * CA_ETOOBIG (reply over resp's bound), CA_EUNAVAIL (cannot connect,
     * connection lost); err says what happened. */
    int (*post)(void *data, struct llm_http *h, struct ca_err *err);
};

struct llm_client;

int llm_client_new(const struct llm_opts *o, struct llm_client **out,
                   struct ca_err *err) WARN_UNUSED_RESULT;
void llm_client_free(struct llm_client *c);
/* Replace the HTTP layer (tests, benchmarks); NULL restores libcurl. */
void llm_client_set_transport(struct llm_client *c, const struct llm_transport *t);
const struct llm_opts *llm_client_opts(const struct llm_client *c);

/*
 * One chat completion with retries. 0 and a parsed *r; or CA_ETIMEOUT (out
 * of time, or cancelled), CA_EUNAVAIL (server unreachable or failing after
 * the retries), CA_ETOOBIG (reply over the limit, or the server said the
 * context is too long), CA_EUSAGE (the server refused the request: 4xx),
 * CA_EPARSE (not a Chat Completions reply). r->attempts and r->http_us are
 * set in every case.
 */
int llm_chat(struct llm_client *c, struct sv messages_json, struct sv tools_json, int64_t seq,
             struct llm_reply *r, struct ca_err *err) WARN_UNUSED_RESULT;

#endif
