/*
 * limits.h - every size driven from outside has a named limit here. Going
 * over a limit fails with CA_ETOOBIG and a message naming the limit; nothing
 * grows without bound.
 */
#ifndef CA_LIMITS_H
#define CA_LIMITS_H

#define CA_KIB ((size_t)1024)
#define CA_MIB (CA_KIB * 1024)

/* One task source file (KernelBench .py or one JSONL row's code). */
#define CA_LIMIT_TASK_BYTES (1 * CA_MIB)
/* One line of a JSONL dataset. */
#define CA_LIMIT_JSONL_LINE (4 * CA_MIB)
/* A whole dataset file read for import. */
#define CA_LIMIT_DATASET_BYTES (2048 * CA_MIB)
/* Tasks in one source (tree or dataset). */
#define CA_LIMIT_DATASET_TASKS 1000000
/* Nesting depth of any JSON document we parse. */
#define CA_LIMIT_JSON_DEPTH 64
/* A JSON document read as a whole (config, manifest, request). */
#define CA_LIMIT_JSON_BYTES (16 * CA_MIB)
/* Characters in a path we build or accept. */
#define CA_LIMIT_PATH 4096
/* Components in a relative path. */
#define CA_LIMIT_PATH_DEPTH 64
/* Default cap on captured stdout/stderr of a child process. */
#define CA_LIMIT_CHILD_OUTPUT (1 * CA_MIB)
/* A compiler log kept for the agent. */
#define CA_LIMIT_COMPILE_LOG (256 * CA_KIB)
/* Output of one tool call returned to the model. */
#define CA_LIMIT_TOOL_OUTPUT (64 * CA_KIB)
/* Content of one Write (and one Edit/NotebookEdit string) from the model. */
#define CA_LIMIT_WRITE_BYTES (4 * CA_MIB)
/* One request to a server (MCP, OpenEnv). */
#define CA_LIMIT_REQUEST_BYTES (8 * CA_MIB)
/* One reply from a model server. */
#define CA_LIMIT_MODEL_REPLY (16 * CA_MIB)
/* Tool calls in one model reply (native or text-form); more are refused. */
#define CA_LIMIT_TOOL_CALLS 64
/* One request to a model server: the whole conversation plus tool schemas. */
#define CA_LIMIT_MODEL_REQUEST (64 * CA_MIB)
/* One line of a trajectory file read back by `run --resume`. */
#define CA_LIMIT_TRAJECTORY_LINE (32 * CA_MIB)
/* A whole trajectory file read back by `run --resume`. */
#define CA_LIMIT_TRAJECTORY_BYTES (1024 * CA_MIB)
/* Length of an identifier (task id, episode id, name). */
#define CA_LIMIT_ID 128
/* Operators listed for one task. */
#define CA_LIMIT_TASK_OPS 64
/* Files in one template or workspace. */
#define CA_LIMIT_WORKSPACE_FILES 4096
/* One value of a store's meta table (bench runs, synth output) read back. */
#define CA_LIMIT_DB_META (1 * CA_MIB)

#endif
