/* server_openai.c -- the OpenAI-compatible JSON API: request parsing and validation, chat/completions answers,
 * /tokenize, /v1/models. Queueing is server_slots.c's, streaming server_sse.c's. */
#include "base/base.h"
#include "json/json.h"
#include "server/server_internal.h"
#include "tokenizer/utf8.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *pb_server_finish_reason(const pb_gen_stats *st) {
    switch (st->stop_reason) {
    case 1:
    case 5: return "length";
    default: return "stop";
    }
}

cJSON *pb_server_usage_obj(const job *j) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)j->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)j->stats.n_generated);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(j->n_prompt + j->stats.n_generated));
    return u;
}

/* ---- request parsing -------------------------------------------------------------------------------- */

typedef struct parse_err {
    char msg[512];
    const char *param;
    const char *code;
    unsigned status; /* 0 = 400 */
} parse_err;

static bool perr(parse_err *e, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool perr(parse_err *e, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->msg, sizeof e->msg, fmt, ap);
    va_end(ap);
    e->param = param;
    return false;
}

/* Finds the first string (value or key) in the tree that is not valid UTF-8 and writes its path ("messages[0].content")
 * into path. False when every string is valid. */
static bool bad_utf8(const cJSON *node, char *path, size_t cap, size_t len) {
    int idx = 0; /* counted as the loop goes: finding each index from the head made a 1 MB array take minutes */
    for (const cJSON *c = node->child; c; c = c->next, idx++) {
        size_t n = len;
        if (cJSON_IsArray(node)) {
            n += (size_t)snprintf(path + len, len < cap ? cap - len : 0, "[%d]", idx);
        } else if (c->string) {
            if (!pb_utf8_valid((const uint8_t *)c->string, strlen(c->string))) {
                snprintf(path + len, len < cap ? cap - len : 0, "%s(a key)", len ? "." : "");
                return true;
            }
            n += (size_t)snprintf(path + len, len < cap ? cap - len : 0, "%s%.60s", len ? "." : "", c->string);
        }
        if (n >= cap) n = cap - 1;
        if (cJSON_IsString(c) && !pb_utf8_valid((const uint8_t *)c->valuestring, strlen(c->valuestring))) return true;
        if ((cJSON_IsArray(c) || cJSON_IsObject(c)) && bad_utf8(c, path, cap, n)) return true;
        path[len] = 0;
    }
    return false;
}

/* The request body as one JSON value, or NULL with why filled. cJSON alone stops at the end of the first value (text
 * after it was ignored: '{"max_tokens": 1} junk' was taken) and keeps a string only up to a NUL byte (the rest of a
 * message was dropped without a word), so both are refused here. */
static cJSON *parse_body(const request *rq, char *why, size_t cap) {
    const char *body = rq->body ? rq->body : "";
    const char *nul = memchr(body, 0, rq->len);
    if (nul) {
        snprintf(why, cap, "request body holds a NUL byte (at byte %zu); JSON text cannot", (size_t)(nul - body));
        return NULL;
    }
    size_t at;
    bool trailing;
    cJSON *root = pb_json_parse_one(body, rq->len, &at, &trailing);
    if (trailing) {
        snprintf(why, cap, "request body is not valid JSON: more text after the JSON value (at byte %zu)", at);
    } else if (!root && pb_json_too_deep(body, rq->len, at)) { /* valid JSON, it may be: said as such */
        snprintf(why, cap, "request body nests arrays or objects more than %d levels deep (at byte %zu)",
                 CJSON_NESTING_LIMIT, at);
    } else if (!root && pb_json_bad_u_escape_at(body, rq->len, at)) {
        snprintf(why, cap, "request body is not valid JSON: \\u must be followed by 4 hex digits (at byte %zu)", at);
    } else if (!root && pb_json_lone_surrogate(body, rq->len, at)) { /* valid JSON grammar, but no text */
        snprintf(why, cap,
                 "request body holds half a UTF-16 surrogate pair (\\%.5s at byte %zu) without its other half: not "
                 "Unicode text",
                 body + at + 1, at);
    } else if (!root) {
        snprintf(why, cap, "request body is not valid JSON");
    }
    return root;
}

static bool get_number(cJSON *root, const char *key, double lo, double hi, double *out, parse_err *e) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsNumber(v)) return perr(e, key, "'%s' must be a number", key);
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return perr(e, key, "'%s' must be between %g and %g, got %g", key, lo, hi, v->valuedouble);
    *out = v->valuedouble;
    return true;
}

static bool get_int(cJSON *root, const char *key, double lo, double hi, int64_t *out, parse_err *e) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v)) return true;
    /* floor, not a cast to int64_t: converting 1e20 (or an infinity, 1e999) to an integer is undefined behaviour */
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble))
        return perr(e, key, "'%s' must be an integer", key);
    if (!(v->valuedouble >= lo && v->valuedouble <= hi) && lo == hi) /* "between 1 and 1" said 'n' must be 1 */
        return perr(e, key, "'%s' must be %.0f, got %.0f", key, lo, v->valuedouble);
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return perr(e, key, "'%s' must be between %.0f and %.0f, got %.0f", key, lo, hi, v->valuedouble);
    *out = (int64_t)v->valuedouble;
    return true;
}

/* A field this server does not implement, present with the wrong type: refused like a wrong type of a field it does
 * implement, not read as "off" (a client sending "logprobs": "5" asked for something). True when it is absent, null or
 * of the JSON type is_type accepts. */
static bool typed(cJSON *root, const char *key, cJSON_bool (*is_type)(const cJSON *), const char *what, parse_err *e) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    if (!v || cJSON_IsNull(v) || is_type(v)) return true;
    return perr(e, key, "'%s' must be %s", key, what);
}

/* A JSON number or boolean (logprobs: a boolean for chat, an integer for completions). */
static cJSON_bool is_number_or_bool(const cJSON *v) { return cJSON_IsNumber(v) || cJSON_IsBool(v); }

/* Message content: a string, or an array of {"type":"text","text":...} parts (joined). malloc'd. */
static char *content_text(cJSON *content) {
    if (cJSON_IsString(content)) return pb_strdup(content->valuestring);
    if (!cJSON_IsArray(content)) return NULL;
    size_t n = 0;
    cJSON *part;
    cJSON_ArrayForEach(part, content) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "text");
        cJSON *ty = cJSON_GetObjectItemCaseSensitive(part, "type");
        if (!cJSON_IsString(t) || !cJSON_IsString(ty) || strcmp(ty->valuestring, "text") != 0) return NULL;
        n += strlen(t->valuestring);
    }
    char *s = malloc(n + 1), *p = s;
    if (!s) return NULL;
    cJSON_ArrayForEach(part, content) {
        const char *t = cJSON_GetObjectItemCaseSensitive(part, "text")->valuestring;
        size_t l = strlen(t);
        memcpy(p, t, l);
        p += l;
    }
    *p = 0;
    return s;
}

/* pb_gen_params_check against n_vocab (0: every rule but the token ids' range), its message with the field named. */
static bool gen_check(const pb_gen_params *gen, int32_t n_vocab, parse_err *e) {
    if (pb_gen_params_check(gen, n_vocab) == PB_OK) return true;
    static const char *const fields[] = {
        "top_p", "min_p", "top_k", "temperature", "presence_penalty", "frequency_penalty", "stop", "logit bias"};
    const char *msg = pb_last_error(), *param = NULL;
    for (size_t k = 0; k < sizeof fields / sizeof *fields && !param; k++)
        if (strstr(msg, fields[k])) param = k == 7 ? "logit_bias" : fields[k];
    return perr(e, param, "%s", msg);
}

/* Fills the sampling/stop parameters shared by both routes (no check here needs the model: see check_with_model). */
static bool parse_gen(pb_server *srv, cJSON *root, job *j, parse_err *e) {
    j->gen = pb_gen_default_params();
    cJSON *preset = cJSON_GetObjectItemCaseSensitive(root, "preset");
    if (preset && !cJSON_IsNull(preset)) {
        pb_preset pr;
        if (!cJSON_IsString(preset) || pb_preset_from_name(preset->valuestring, &pr) != PB_OK)
            return perr(e, "preset", "'preset' must be one of precise, balanced, creative, code");
        j->gen.sampler = pb_sampler_preset(pr);
    }
    double d;
    int64_t i;
    d = j->gen.sampler.temperature;
    if (!get_number(root, "temperature", 0, 2, &d, e)) return false;
    j->gen.sampler.temperature = (float)d;
    d = j->gen.sampler.top_p;
    if (!get_number(root, "top_p", 0, 1, &d, e)) return false;
    j->gen.sampler.top_p = (float)d;
    d = j->gen.sampler.min_p;
    if (!get_number(root, "min_p", 0, 1, &d, e)) return false;
    j->gen.sampler.min_p = (float)d;
    d = j->gen.sampler.presence_penalty;
    if (!get_number(root, "presence_penalty", -2, 2, &d, e)) return false;
    j->gen.sampler.presence_penalty = (float)d;
    d = j->gen.sampler.frequency_penalty;
    if (!get_number(root, "frequency_penalty", -2, 2, &d, e)) return false;
    j->gen.sampler.frequency_penalty = (float)d;
    i = j->gen.sampler.top_k;
    if (!get_int(root, "top_k", 0, 1e6, &i, e)) return false;
    j->gen.sampler.top_k = (int)i;
    i = -1;
    if (!get_int(root, "seed", -9.2e18, 9.2e18, &i, e)) return false;
    if (i != -1)
        j->gen.sampler.seed = (uint64_t)i;
    else
        j->gen.sampler.seed = (uint64_t)pb_time_ns() ^ atomic_fetch_add(&srv->id_counter, 1) * 0x9E3779B97F4A7C15ull;
    i = srv->p.max_tokens_cap < 256 ? srv->p.max_tokens_cap : 256; /* default when the request names none */
    if (!get_int(root, "max_tokens", 1, srv->p.max_tokens_cap, &i, e)) return false;
    if (!get_int(root, "max_completion_tokens", 1, srv->p.max_tokens_cap, &i, e)) return false;
    j->gen.max_tokens = (int)i;
    i = 1;
    if (!get_int(root, "n", 1, 1, &i, e)) return false; /* one choice a request */
    cJSON *stream = cJSON_GetObjectItemCaseSensitive(root, "stream");
    if (stream && !cJSON_IsNull(stream)) {
        if (!cJSON_IsBool(stream)) return perr(e, "stream", "'stream' must be a boolean");
        j->stream = cJSON_IsTrue(stream);
    }
    cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (so && !cJSON_IsNull(so)) {
        cJSON *iu = cJSON_IsObject(so) ? cJSON_GetObjectItemCaseSensitive(so, "include_usage") : NULL;
        if (!cJSON_IsObject(so) || (iu && !cJSON_IsNull(iu) && !cJSON_IsBool(iu)))
            return perr(e, "stream_options", "'stream_options' must be an object {\"include_usage\": boolean}");
        j->include_usage = cJSON_IsTrue(iu);
    }
    cJSON *stop = cJSON_GetObjectItemCaseSensitive(root, "stop");
    if (stop && !cJSON_IsNull(stop)) {
        int n = cJSON_IsString(stop) ? 1 : cJSON_IsArray(stop) ? cJSON_GetArraySize(stop) : -1;
        if (n < 0 || n > 4) return perr(e, "stop", "'stop' must be a string or an array of at most 4 strings");
        j->stop = calloc((size_t)(n ? n : 1), sizeof(char *));
        if (!j->stop) return perr(e, NULL, "out of memory");
        for (int k = 0; k < n; k++) {
            cJSON *s = cJSON_IsString(stop) ? stop : cJSON_GetArrayItem(stop, k);
            if (!cJSON_IsString(s) || !s->valuestring[0])
                return perr(e, "stop", "'stop' entries must be non-empty strings");
            j->stop[j->n_stop++] = pb_strdup(s->valuestring);
        }
        j->gen.stop = (const char *const *)j->stop;
        j->gen.n_stop = j->n_stop;
    }
    /* "logit_bias": {"token id": -100..100}, as OpenAI takes it; -100 bans the token */
    cJSON *lb = cJSON_GetObjectItemCaseSensitive(root, "logit_bias");
    if (lb && !cJSON_IsNull(lb)) {
        int n = cJSON_IsObject(lb) ? cJSON_GetArraySize(lb) : -1;
        if (n < 0 || n > 1024)
            return perr(e, "logit_bias", "'logit_bias' must be an object of at most 1024 {\"token id\": bias}");
        j->bias_ids = malloc((size_t)(n ? n : 1) * sizeof *j->bias_ids);
        j->bias_values = malloc((size_t)(n ? n : 1) * sizeof *j->bias_values);
        if (!j->bias_ids || !j->bias_values) return perr(e, NULL, "out of memory");
        int k = 0;
        cJSON *b;
        cJSON_ArrayForEach(b, lb) {
            char *end = NULL;
            errno = 0;
            long id = b->string ? strtol(b->string, &end, 10) : -1;
            /* digits only: strtol alone also takes " 5" and "+5" */
            if (!b->string || !isdigit((unsigned char)*b->string) || *end || errno || id < 0 || id > INT32_MAX)
                return perr(e, "logit_bias", "'logit_bias' keys must be token ids (decimal integers), got '%.40s'",
                            b->string ? b->string : "");
            if (!cJSON_IsNumber(b) || !(b->valuedouble >= -100 && b->valuedouble <= 100))
                return perr(e, "logit_bias", "'logit_bias' values must be numbers from -100 to 100 (token %ld)", id);
            j->bias_ids[k] = (int32_t)id;
            j->bias_values[k++] = b->valuedouble <= -100 ? -INFINITY : (float)b->valuedouble;
        }
        j->gen.sampler.bias_ids = j->bias_ids;
        j->gen.sampler.bias_values = j->bias_values;
        j->gen.sampler.n_bias = k;
    }
    /* what this server does not do is refused, not silently ignored: the client would read an answer that lacks
     * what it asked for (log probabilities, tool calls, JSON output) */
    cJSON *lp = cJSON_GetObjectItemCaseSensitive(root, "logprobs");
    if (!typed(root, "logprobs", is_number_or_bool, "a boolean or an integer", e)) return false;
    if (cJSON_IsTrue(lp) || (cJSON_IsNumber(lp) && lp->valuedouble != 0))
        return perr(e, "logprobs", "'logprobs' is not supported by this server");
    cJSON *tlp = cJSON_GetObjectItemCaseSensitive(root, "top_logprobs");
    if (!typed(root, "top_logprobs", cJSON_IsNumber, "an integer", e)) return false;
    if (cJSON_IsNumber(tlp) && tlp->valuedouble != 0)
        return perr(e, "top_logprobs", "'top_logprobs' is not supported by this server");
    static const char *const tool_fields[] = {"tools", "functions"};
    for (int k = 0; k < 2; k++) {
        cJSON *t = cJSON_GetObjectItemCaseSensitive(root, tool_fields[k]);
        if (t && !cJSON_IsNull(t) && !(cJSON_IsArray(t) && cJSON_GetArraySize(t) == 0))
            return perr(e, tool_fields[k], "'%s' (function calling) is not supported by this server", tool_fields[k]);
    }
    cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "tool_choice");
    if (tc && !cJSON_IsNull(tc) &&
        !(cJSON_IsString(tc) && (strcmp(tc->valuestring, "none") == 0 || strcmp(tc->valuestring, "auto") == 0)))
        return perr(e, "tool_choice", "'tool_choice' other than \"none\" or \"auto\" is not supported by this server");
    cJSON *rf = cJSON_GetObjectItemCaseSensitive(root, "response_format");
    if (rf && !cJSON_IsNull(rf)) {
        cJSON *ty = cJSON_IsObject(rf) ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "text") != 0)
            return perr(e, "response_format",
                        "'response_format' other than {\"type\": \"text\"} is not supported by "
                        "this server");
    }
    /* the engine's own rules, so a value it would refuse is a 400 now, not a failure after queueing; here without
     * the vocabulary (n_vocab 0: the request names a model that may not be loaded yet), check_with_model adds it */
    return gen_check(&j->gen, 0, e);
}

/* The checks that need the loaded model, run once the request holds it (pb_server_model_acquire): logit_bias token
 * ids against its vocabulary, thinking asked of a model without a thinking mode. Everything else was checked before,
 * so a bad request never makes the server load the model it names. */
static bool check_with_model(pb_server *srv, job *j, parse_err *e) {
    if (!gen_check(&j->gen, pb_vocab_size(srv->vocab), e)) return false;
    if (j->think && pb_vocab_find(srv->vocab, "<|think|>", 9) < 0)
        return perr(e, "think", "this model has no thinking mode (no <|think|> token: not a Gemma 4 model)");
    return true;
}

/* Tokenizes into j->prompt (grows the buffer as pb_tokenize asks). */
static bool tokenize_into(job *j, const pb_model *m, const pb_vocab *v, const pb_chat_msg *msgs, int n_msgs,
                          const char *text, parse_err *e) {
    int64_t cap = 1024, n = 0;
    for (int attempt = 0; attempt < 2; attempt++) {
        free(j->prompt);
        j->prompt = malloc((size_t)cap * sizeof(int32_t));
        if (!j->prompt) return perr(e, NULL, "out of memory");
        pb_chat_opts co = {.add_generation_prompt = true, .think = j->think};
        pb_status s = msgs ? pb_chat_tokenize_opts(m, msgs, n_msgs, &co, j->prompt, cap, &n)
                           : pb_tokenize(v, text, strlen(text), PB_TOK_ADD_BOS, j->prompt, cap, &n);
        if (s == PB_OK) {
            j->n_prompt = n;
            return true;
        }
        if (n <= cap) return perr(e, NULL, "cannot tokenize the prompt: %s", pb_last_error());
        cap = n;
    }
    return perr(e, NULL, "cannot tokenize the prompt");
}

/* The roles a message may have, as static strings (the request's JSON is freed before the prompt is built). */
static const char *role_of(const char *r) {
    static const char *const roles[] = {"system", "user", "assistant", "model"};
    for (int i = 0; i < 4; i++)
        if (strcmp(r, roles[i]) == 0) return roles[i];
    return strcmp(r, "developer") == 0 ? "system" : NULL;
}

/* Reads the messages into the job (copies; the prompt is built and tokenized later, see build_prompt). */
static bool parse_chat(pb_server *srv, cJSON *root, job *j, parse_err *e) {
    cJSON *msgs = cJSON_GetObjectItemCaseSensitive(root, "messages");
    if (!msgs) return perr(e, "messages", "'messages' is required");
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
        return perr(e, "messages", "'messages' must be a non-empty array");
    int n = cJSON_GetArraySize(msgs);
    if (n > 1000) return perr(e, "messages", "too many messages (%d, at most 1000)", n);
    j->msgs = calloc((size_t)n, sizeof *j->msgs);
    j->texts = calloc((size_t)n, sizeof *j->texts);
    if (!j->msgs || !j->texts) return perr(e, NULL, "out of memory");
    j->last_user = -1;
    cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        int k = j->n_msgs;
        cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        cJSON *content = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role))
            return perr(e, "messages", "messages[%d] must be an object with a string 'role'", k);
        const char *r = role_of(role->valuestring);
        if (!r)
            return perr(e, "messages", "messages[%d].role '%.40s' is not one of system, user, assistant", k,
                        role->valuestring);
        j->texts[k] = content_text(content);
        if (!j->texts[k])
            return perr(e, "messages", "messages[%d].content must be a string or an array of text parts", k);
        j->msgs[k].role = r;
        j->msgs[k].content = j->texts[k];
        if (strcmp(r, "user") == 0) j->last_user = k;
        j->n_msgs++;
    }
    if (j->last_user >= 0) j->question = pb_strdup(j->texts[j->last_user]);
    /* Gemma 4 thinking: "think": true, or chat_template_kwargs {"enable_thinking": true} as llama.cpp's server */
    cJSON *think = cJSON_GetObjectItemCaseSensitive(root, "think");
    cJSON *kw = cJSON_GetObjectItemCaseSensitive(root, "chat_template_kwargs");
    /* refused when not an object, as a wrong type of any field the server reads (it was ignored: no thinking) */
    if (!typed(root, "chat_template_kwargs", cJSON_IsObject, "an object", e)) return false;
    if (!think && cJSON_IsObject(kw)) think = cJSON_GetObjectItemCaseSensitive(kw, "enable_thinking");
    if (think && !cJSON_IsNull(think)) {
        if (!cJSON_IsBool(think)) return perr(e, "think", "'think' (enable_thinking) must be a boolean");
        j->think = cJSON_IsTrue(think); /* whether the model can think: check_with_model, once it is loaded */
    }
    /* "use my documents": ground the last user message in the knowledge base (when the prompt is built). */
    cJSON *use_docs = cJSON_GetObjectItemCaseSensitive(root, "use_documents");
    if (use_docs && !cJSON_IsNull(use_docs)) {
        if (!cJSON_IsBool(use_docs)) return perr(e, "use_documents", "'use_documents' must be a boolean");
        j->use_documents = cJSON_IsTrue(use_docs);
        if (j->use_documents && j->last_user < 0) return perr(e, "messages", "'use_documents' needs a user message");
        if (j->use_documents && !srv->p.hooks.kb_prompt)
            return perr(e, "use_documents", "no knowledge base is configured on this server (serve --db KB)");
    }
    return parse_gen(srv, root, j, e);
}

static bool parse_completion(pb_server *srv, cJSON *root, job *j, parse_err *e) {
    cJSON *prompt = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (cJSON_IsArray(prompt) && cJSON_GetArraySize(prompt) == 1) prompt = cJSON_GetArrayItem(prompt, 0);
    if (!cJSON_IsString(prompt)) return perr(e, "prompt", "'prompt' must be a string");
    /* completion options this server does not do: refused, not ignored */
    cJSON *echo = cJSON_GetObjectItemCaseSensitive(root, "echo");
    if (!typed(root, "echo", cJSON_IsBool, "a boolean", e)) return false;
    if (cJSON_IsTrue(echo)) return perr(e, "echo", "'echo' is not supported by this server");
    cJSON *bo = cJSON_GetObjectItemCaseSensitive(root, "best_of");
    if (!typed(root, "best_of", cJSON_IsNumber, "an integer", e)) return false;
    if (cJSON_IsNumber(bo) && bo->valuedouble != 1)
        return perr(e, "best_of", "'best_of' other than 1 is not supported");
    cJSON *sfx = cJSON_GetObjectItemCaseSensitive(root, "suffix");
    if (!typed(root, "suffix", cJSON_IsString, "a string", e)) return false;
    if (cJSON_IsString(sfx) && sfx->valuestring[0])
        return perr(e, "suffix", "'suffix' is not supported by this server");
    if (!parse_gen(srv, root, j, e)) return false;
    j->question = pb_strdup(prompt->valuestring);
    j->text = pb_strdup(prompt->valuestring);
    if (!j->question || !j->text) return perr(e, NULL, "out of memory");
    return true;
}

/* Builds the prompt (knowledge-base grounding, chat template) and tokenizes it; run only once the request holds a
 * queue place. Sets e->status 500 for a failure that is the server's, not the request's. */
static bool build_prompt(pb_server *srv, job *j, parse_err *e) {
    if (j->kind == JOB_COMPLETION) return tokenize_into(j, srv->model, srv->vocab, NULL, 0, j->text, e);
    if (j->use_documents) {
        /* the sources get what the context leaves: less the answer (max_tokens) and the conversation around the
         * question (the whole chat tokenized with the question as typed, less the question's own tokens) */
        if (!tokenize_into(j, srv->model, srv->vocab, j->msgs, j->n_msgs, NULL, e)) return false;
        const char *q = j->texts[j->last_user];
        int64_t n_q = 0;
        (void)pb_tokenize(srv->vocab, q, strlen(q), PB_TOK_CHAT_TEXT, NULL, 0, &n_q);
        int64_t around = j->n_prompt - n_q, budget = (int64_t)srv->n_ctx - j->gen.max_tokens - around - 8;
        if (budget < 64)
            return perr(e, "use_documents",
                        "no room for sources: the context (%d tokens) less max_tokens (%d) and the conversation (%lld) "
                        "leaves %lld; send a shorter conversation or a smaller max_tokens",
                        srv->n_ctx, j->gen.max_tokens, (long long)around, (long long)PB_MAX(budget, 0));
        char *prompt = NULL, *sources = NULL;
        if (!srv->p.hooks.kb_prompt(srv->p.hooks.kb_user, q, budget, &prompt, &sources)) {
            char note[2048];
            bool why = srv->p.hooks.kb_status && srv->p.hooks.kb_status(srv->p.hooks.status_user, note, sizeof note);
            e->status = 500;
            return perr(e, "use_documents", "the knowledge base could not be searched%s%s", why ? ": " : "",
                        why ? note : "");
        }
        free(j->texts[j->last_user]);
        j->texts[j->last_user] = prompt;
        j->msgs[j->last_user].content = prompt;
        j->sources_json = sources;
    }
    return tokenize_into(j, srv->model, srv->vocab, j->msgs, j->n_msgs, NULL, e);
}

/* Waits for a non-streaming job and sends its answer (or its error); drops the caller's reference. */
static enum MHD_Result respond_whole(pb_server *srv, struct MHD_Connection *c, job *j) {
    /* non-stream: wait here (thread per connection), watching the client: one that went away cancels its job, as a
     * stream's does, instead of holding a slot or a queue place to the end */
    pthread_mutex_lock(&j->mu);
    bool gone = false;
    while (!j->done && !j->fell_back) {
        pb_server_job_wait_locked(j, 200);
        if (!gone && !j->done && pb_server_client_gone(c)) {
            gone = true;
            pthread_mutex_unlock(&j->mu);
            pb_server_job_cancel(j);
            pthread_mutex_lock(&j->mu);
        }
    }
    if (j->shut_down) {
        pthread_mutex_unlock(&j->mu);
        pb_server_job_release(j);
        return pb_server_send_error(srv, c, 503, "server_error", NULL, "shutting_down", "the server is shutting down");
    }
    /* Cancelled because the client left (or closed its sending side, which reads the same): what the job holds is
     * cut short, so no 200 calls it a whole answer ("finish_reason": "stop"). 499 as nginx logs it ("client closed
     * request"): the request log says what happened, and a client still reading learns it. A job that ended on its
     * own before the cancel reached it is answered as usual. */
    if (gone && !j->fell_back &&
        (j->status == PB_ERR_CANCELLED || j->stats.stop_reason == PB_STOP_CALLBACK ||
         j->stats.stop_reason == PB_STOP_CANCELLED)) {
        pthread_mutex_unlock(&j->mu);
        pb_server_job_release(j);
        return pb_server_send_error(srv, c, 499, "invalid_request_error", NULL, "client_closed_request",
                                    "the request was cancelled: the client closed its side of the connection");
    }
    bool bad_request = j->status == PB_ERR_INVALID_ARG; /* never answered from the FAQ */
    if (!j->fell_back && !bad_request && j->status != PB_OK && j->status != PB_ERR_CANCELLED) {
        char text[4096];
        pthread_mutex_unlock(&j->mu);
        bool found = pb_server_faq_fallback(j, text, sizeof text);
        pthread_mutex_lock(&j->mu);
        if (found) pb_server_use_fallback_locked(j, text);
    }
    enum MHD_Result ret;
    if (!j->fell_back && j->status != PB_OK && j->status != PB_ERR_CANCELLED) {
        char err[512];
        snprintf(err, sizeof err, "%s", j->err);
        bool ctx = j->status == PB_ERR_CONTEXT_FULL;
        pthread_mutex_unlock(&j->mu);
        ret = pb_server_send_error(srv, c, ctx || bad_request ? 400 : 500,
                                   ctx || bad_request ? "invalid_request_error" : "server_error", NULL,
                                   ctx ? "context_length_exceeded" : NULL, "generation failed: %s", err);
    } else {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "id", j->id);
        cJSON_AddStringToObject(o, "object", j->kind == JOB_CHAT ? "chat.completion" : "text_completion");
        cJSON_AddNumberToObject(o, "created", (double)j->created);
        cJSON_AddStringToObject(o, "model", srv->model_id);
        cJSON *choices = cJSON_AddArrayToObject(o, "choices");
        cJSON *ch = cJSON_CreateObject();
        cJSON_AddItemToArray(choices, ch);
        cJSON_AddNumberToObject(ch, "index", 0);
        if (j->kind == JOB_CHAT) {
            cJSON *msg = cJSON_AddObjectToObject(ch, "message");
            cJSON_AddStringToObject(msg, "role", "assistant");
            cJSON_AddStringToObject(msg, "content", j->out ? j->out : "");
            if (j->think || j->thought_len)
                cJSON_AddStringToObject(msg, "reasoning_content", j->thought ? j->thought : "");
        } else {
            cJSON_AddStringToObject(ch, "text", j->out ? j->out : "");
        }
        cJSON_AddStringToObject(ch, "finish_reason", j->fell_back ? "stop" : pb_server_finish_reason(&j->stats));
        cJSON_AddItemToObject(o, "usage", pb_server_usage_obj(j));
        if (j->fell_back) cJSON_AddStringToObject(o, "pocketbrain_fallback", "faq");
        if (j->sources_json) cJSON_AddItemToObject(o, "sources", cJSON_Parse(j->sources_json));
        pthread_mutex_unlock(&j->mu);
        ret = pb_server_send_json(srv, c, 200, o);
    }
    pb_server_job_release(j);
    return ret;
}

/* The refusal of pb_server_model_acquire as an OpenAI error. */
static enum MHD_Result send_acquire_error(pb_server *srv, struct MHD_Connection *c, unsigned status, const char *code,
                                          const char *msg) {
    bool client = status == 404 || status == 499; /* the request's doing, not the server's */
    return pb_server_send_error(srv, c, status, client ? "invalid_request_error" : "server_error",
                                status == 404 ? "model" : NULL, code, "%s", msg);
}

enum MHD_Result pb_server_route_generate(pb_server *srv, struct MHD_Connection *c, request *rq, job_kind kind) {
    pthread_mutex_lock(&srv->m.mu);
    if (kind == JOB_CHAT)
        srv->m.req_chat++;
    else
        srv->m.req_completions++;
    pthread_mutex_unlock(&srv->m.mu);
    char why[160];
    cJSON *root = parse_body(rq, why, sizeof why);
    if (!root) return pb_server_send_error(srv, c, 400, "invalid_request_error", NULL, "invalid_json", "%s", why);
    char where[256] = "";
    if (!cJSON_IsObject(root) || bad_utf8(root, where, sizeof where, 0)) {
        bool obj = cJSON_IsObject(root);
        cJSON_Delete(root);
        if (!obj)
            return pb_server_send_error(srv, c, 400, "invalid_request_error", NULL, "invalid_json",
                                        "request body must be a JSON object");
        return pb_server_send_error(srv, c, 400, "invalid_request_error", where, "invalid_utf8",
                                    "'%s' is not valid UTF-8 text", where);
    }
    if (pb_json_has_nul_escape(rq->body ? rq->body : "", rq->len)) {
        cJSON_Delete(root);
        return pb_server_send_error(srv, c, 400, "invalid_request_error", NULL, "invalid_text",
                                    "the request's text contains a NUL character (\\u0000)");
    }
    cJSON *mf = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (mf && !cJSON_IsNull(mf) && !cJSON_IsString(mf)) {
        cJSON_Delete(root);
        return pb_server_send_error(srv, c, 400, "invalid_request_error", "model", NULL, "'model' must be a string");
    }
    job *j = pb_server_job_new(srv, kind);
    char *model_name = cJSON_IsString(mf) ? pb_strdup(mf->valuestring) : NULL;
    if (!j || (cJSON_IsString(mf) && !model_name)) {
        if (j) pb_server_job_release(j);
        free(model_name);
        cJSON_Delete(root);
        return pb_server_send_error(srv, c, 500, "server_error", NULL, NULL, "out of memory");
    }
    /* Every field is checked before the model the request names is loaded: a request that is refused anyway must not
     * cost a model switch (closing the loaded model, waiting for its running jobs, opening the other one). */
    parse_err e;
    memset(&e, 0, sizeof e);
    bool ok = kind == JOB_CHAT ? parse_chat(srv, root, j, &e) : parse_completion(srv, root, j, &e);
    cJSON_Delete(root);
    if (!ok) {
        free(model_name);
        pb_server_job_release(j);
        return pb_server_send_error(srv, c, 400, "invalid_request_error", e.param, e.code, "%s", e.msg);
    }
    /* the model named in the request is loaded (or this waits for it) before its prompt is tokenized */
    char merr[512];
    const char *mcode;
    unsigned refused_model = pb_server_model_acquire(srv, model_name, c, merr, sizeof merr, &mcode);
    free(model_name);
    if (refused_model) {
        pb_server_job_release(j);
        return send_acquire_error(srv, c, refused_model, mcode, merr);
    }
    j->holds_model = true;
    if (!check_with_model(srv, j, &e)) {
        pb_server_job_release(j);
        return pb_server_send_error(srv, c, 400, "invalid_request_error", e.param, e.code, "%s", e.msg);
    }
    /* A queue place first, then the prompt: building and tokenizing it (the knowledge-base search, a 1 MB text) is
     * work and memory that only requests with a place may spend. */
    unsigned refused = pb_server_queue_reserve(srv);
    if (!refused && !build_prompt(srv, j, &e)) {
        pb_server_queue_unreserve(srv);
        pb_server_job_release(j);
        return pb_server_send_error(srv, c, e.status ? e.status : 400,
                                    e.status >= 500 ? "server_error" : "invalid_request_error", e.param, e.code, "%s",
                                    e.msg);
    }
    if (!refused && j->n_prompt + 1 > srv->n_ctx) {
        int64_t n = j->n_prompt;
        pb_server_queue_unreserve(srv);
        pb_server_job_release(j);
        return pb_server_send_error(
            srv, c, 400, "invalid_request_error", kind == JOB_CHAT ? "messages" : "prompt", "context_length_exceeded",
            "the prompt has %lld tokens; this server's context is %d tokens", (long long)n, srv->n_ctx);
    }
    if (!refused) refused = pb_server_queue_push(srv, j);
    if (refused) {
        pb_server_job_release(j);
        if (refused == 503)
            return pb_server_send_error(srv, c, 503, "server_error", NULL, "shutting_down",
                                        "the server is shutting down");
        return pb_server_send_error(srv, c, 429, "rate_limit_error", NULL, "queue_full",
                                    "all %d slots are busy and %d requests are waiting; try again later", srv->n_slots,
                                    srv->p.queue_max);
    }
    pthread_mutex_lock(&j->mu);
    j->refs++; /* the request log's reference */
    pthread_mutex_unlock(&j->mu);
    rq->job = j;
    return j->stream ? pb_server_sse_respond(srv, c, j) : respond_whole(srv, c, j);
}

enum MHD_Result pb_server_route_tokenize(pb_server *srv, struct MHD_Connection *c, request *rq) {
    char why[160];
    cJSON *root = parse_body(rq, why, sizeof why);
    if (!root) return pb_server_send_error(srv, c, 400, "invalid_request_error", NULL, "invalid_json", "%s", why);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return pb_server_send_error(srv, c, 400, "invalid_request_error", NULL, "invalid_json",
                                    "request body must be a JSON object");
    }
    cJSON *content = cJSON_GetObjectItemCaseSensitive(root, "content");
    if (!cJSON_IsString(content)) {
        cJSON_Delete(root);
        return pb_server_send_error(srv, c, 400, "invalid_request_error", "content", NULL,
                                    "'content' must be a string");
    }
    if (pb_json_has_nul_escape(rq->body ? rq->body : "", rq->len)) {
        cJSON_Delete(root);
        return pb_server_send_error(srv, c, 400, "invalid_request_error", "content", "invalid_text",
                                    "'content' contains a NUL character (\\u0000)");
    }
    int64_t n = 0;
    const char *t = content->valuestring;
    if (!pb_utf8_valid((const uint8_t *)t, strlen(t))) {
        cJSON_Delete(root);
        return pb_server_send_error(srv, c, 400, "invalid_request_error", "content", "invalid_utf8",
                                    "'content' is not valid UTF-8 text");
    }
    char merr[512];
    const char *mcode;
    unsigned refused = pb_server_model_acquire(srv, NULL, c, merr, sizeof merr, &mcode);
    if (refused) {
        cJSON_Delete(root);
        return send_acquire_error(srv, c, refused, mcode, merr);
    }
    /* one count at a time: tokenizing a large text takes memory, and this route has no queue place to bound how many
     * run at once (generation prompts are tokenized only after admission) */
    pthread_mutex_lock(&srv->tok_mu);
    pb_status s = pb_tokenize(srv->vocab, t, strlen(t), 0, NULL, 0, &n);
    pthread_mutex_unlock(&srv->tok_mu);
    pb_server_model_release(srv);
    cJSON_Delete(root);
    if (s != PB_OK && s != PB_ERR_INVALID_ARG)
        return pb_server_send_error(srv, c, 500, "server_error", NULL, NULL, "tokenize failed: %s", pb_last_error());
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "count", (double)n);
    return pb_server_send_json(srv, c, 200, o);
}
