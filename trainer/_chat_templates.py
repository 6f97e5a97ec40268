"""The chat templates of the model families `looplift model build` writes (`_families`): each renders what its
real family renders, so a model built here reads and writes its family's chat and tool-call format.

    template       family        turns                               tools / calls / results
    QWEN25         qwen          ChatML <|im_start|>role ... <|im_end|>  tools as JSON lines in the system turn inside
                                                                         <tools></tools>; a call is <tool_call>\\n{"name":
                                                                         ..., "arguments": {...}}\\n</tool_call>; results
                                                                         are a user turn of <tool_response> blocks
    QWEN3_CODER    qwen3-coder   ChatML                               tools as XML (<function><name>...) in the system
                                                                         turn; a call is <tool_call>\\n<function=NAME>\\n
                                                                         <parameter=ARG>\\nVALUE\\n</parameter>\\n</function>
                                                                         \\n</tool_call>; results as in QWEN25
    MISTRAL_V3     mistral       <s>[INST]user[/INST]answer</s>       [AVAILABLE_TOOLS][...json...][/AVAILABLE_TOOLS]
                                                                         before the last [INST]; [TOOL_CALLS][{"name",
                                                                         "arguments", "id"}]</s>; [TOOL_RESULTS]{"content",
                                                                         "call_id"}[/TOOL_RESULTS]

QWEN25 is Qwen2.5-Instruct's template, QWEN3_CODER Qwen3-Coder's (its later revision, which writes list and
object argument values as JSON). Both are the originals but for one thing: a tool call's `arguments` given as a
JSON string (the OpenAI wire form) is written as it is, where the originals expect an object (vLLM parses the
string into one before rendering; QWEN25's original would write the string quoted, QWEN3_CODER's would fail).
QWEN25 therefore renders a JSON-string argument exactly as vLLM's rendering of the parsed object when the string
is `json.dumps` output; QWEN3_CODER cannot take a string apart in Jinja and says so (`raise_exception`).

MISTRAL_V3 is ours: Mistral renders its v3 chats with mistral_common (`MistralTokenizer.encode_chat_completion`,
which vLLM uses under `--tokenizer-mode mistral`), not with a template, and the template Mistral's HF repositories
ship differs from mistral_common (tool results, spaces). This one renders mistral_common's v3 token ids through
the HF tokenizer `_families` converts from the same SentencePiece model (tests/test_families.py holds them
equal): control tokens without spaces around them (the tokenizer prepends SentencePiece's "▁" to every text
segment, as mistral_common encodes each segment on its own); all system messages joined by a blank line in
front of the LAST user message, with the tool list before that message's [INST]; an assistant's content with
trailing spaces cut; tool call ids of exactly 9 ASCII letters and digits (v3 requires them; anything else is an
error here, as mistral_common's validator makes it one), except that a call without an id or with "null" is
written without one, as mistral_common writes the call a fine-tuning example trains.

Left to mistral_common, on purpose: merging consecutive messages of one role, and re-serialising JSON that is
not in `json.dumps` form (a tool result or arguments string is written as it is when it looks like JSON; a
string result is quoted, an integer, true/false/null written bare, as mistral_common's json.loads + json.dumps
does). Mistral's templates have no generation prompt: the model answers right after [/INST].
"""

# ruff: noqa: E501 - the Qwen templates are kept line for line as their families ship them, so they diff cleanly

from __future__ import annotations

QWEN25 = r"""{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are Qwen, created by Alibaba Cloud. You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) or (message.role == "assistant" and not message.tool_calls) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n{"name": "' }}
            {{- tool_call.name }}
            {{- '", "arguments": ' }}
            {%- if tool_call.arguments is string %}
                {{- tool_call.arguments }}
            {%- else %}
                {{- tool_call.arguments | tojson }}
            {%- endif %}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

QWEN3_CODER = r"""{% macro render_item_list(item_list, tag_name='required') %}
    {%- if item_list is defined and item_list is iterable and item_list | length > 0 %}
        {%- if tag_name %}{{- '\n<' ~ tag_name ~ '>' -}}{% endif %}
            {{- '[' }}
                {%- for item in item_list -%}
                    {%- if loop.index > 1 %}{{- ", "}}{% endif -%}
                    {%- if item is string -%}
                        {{- "`" ~ item ~ "`" -}}
                    {%- else -%}
                        {{- item -}}
                    {%- endif -%}
                {%- endfor -%}
            {{- ']' }}
        {%- if tag_name %}{{- '</' ~ tag_name ~ '>' -}}{% endif %}
    {%- endif %}
{% endmacro %}

{%- if messages[0]["role"] == "system" %}
    {%- set system_message = messages[0]["content"] %}
    {%- set loop_messages = messages[1:] %}
{%- else %}
    {%- set loop_messages = messages %}
{%- endif %}

{%- if not tools is defined %}
    {%- set tools = [] %}
{%- endif %}

{%- if system_message is defined %}
    {{- "<|im_start|>system\n" + system_message }}
{%- else %}
    {%- if tools is iterable and tools | length > 0 %}
        {{- "<|im_start|>system\nYou are Qwen, a helpful AI assistant that can interact with a computer to solve tasks." }}
    {%- endif %}
{%- endif %}
{%- if tools is iterable and tools | length > 0 %}
    {{- "\n\nYou have access to the following functions:\n\n" }}
    {{- "<tools>" }}
    {%- for tool in tools %}
        {%- if tool.function is defined %}
            {%- set tool = tool.function %}
        {%- endif %}
        {{- "\n<function>\n<name>" ~ tool.name ~ "</name>" }}
        {{- '\n<description>' ~ (tool.description | trim) ~ '</description>' }}
        {{- '\n<parameters>' }}
        {%- for param_name, param_fields in tool.parameters.properties|items %}
            {{- '\n<parameter>' }}
            {{- '\n<name>' ~ param_name ~ '</name>' }}
            {%- if param_fields.type is defined %}
                {{- '\n<type>' ~ (param_fields.type | string) ~ '</type>' }}
            {%- endif %}
            {%- if param_fields.description is defined %}
                {{- '\n<description>' ~ (param_fields.description | trim) ~ '</description>' }}
            {%- endif %}
            {{- render_item_list(param_fields.enum, 'enum') }}
            {%- set handled_keys = ['type', 'description', 'enum', 'required'] %}
            {%- for json_key in param_fields.keys() | reject("in", handled_keys) %}
                {%- set normed_json_key = json_key | replace("-", "_") | replace(" ", "_") | replace("$", "") %}
                {%- if param_fields[json_key] is mapping %}
                    {{- '\n<' ~ normed_json_key ~ '>' ~ (param_fields[json_key] | tojson | safe) ~ '</' ~ normed_json_key ~ '>' }}
                {%- else %}
                    {{-'\n<' ~ normed_json_key ~ '>' ~ (param_fields[json_key] | string) ~ '</' ~ normed_json_key ~ '>' }}
                {%- endif %}
            {%- endfor %}
            {{- render_item_list(param_fields.required, 'required') }}
            {{- '\n</parameter>' }}
        {%- endfor %}
        {{- render_item_list(tool.parameters.required, 'required') }}
        {{- '\n</parameters>' }}
        {%- if tool.return is defined %}
            {%- if tool.return is mapping %}
                {{- '\n<return>' ~ (tool.return | tojson | safe) ~ '</return>' }}
            {%- else %}
                {{- '\n<return>' ~ (tool.return | string) ~ '</return>' }}
            {%- endif %}
        {%- endif %}
        {{- '\n</function>' }}
    {%- endfor %}
    {{- "\n</tools>" }}
    {{- '\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n- You may provide optional reasoning for your function call in natural language BEFORE the function call, but NOT after\n- If there is no function call available, answer the question like normal with your current knowledge and do not tell the user about function calls\n</IMPORTANT>' }}
{%- endif %}
{%- if system_message is defined %}
    {{- '<|im_end|>\n' }}
{%- else %}
    {%- if tools is iterable and tools | length > 0 %}
        {{- '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in loop_messages %}
    {%- if message.role == "assistant" and message.tool_calls is defined and message.tool_calls is iterable and message.tool_calls | length > 0 %}
        {{- '<|im_start|>' + message.role }}
        {%- if message.content is defined and message.content is string and message.content | trim | length > 0 %}
            {{- '\n' + message.content | trim + '\n' }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {%- if tool_call.function is defined %}
                {%- set tool_call = tool_call.function %}
            {%- endif %}
            {{- '\n<tool_call>\n<function=' + tool_call.name + '>\n' }}
            {%- if tool_call.arguments is string %}
                {{- raise_exception('tool call arguments must be an object here, not a JSON string: parse them first (vLLM does before rendering)') }}
            {%- endif %}
            {%- if tool_call.arguments is defined %}
                {%- for args_name, args_value in tool_call.arguments|items %}
                    {{- '<parameter=' + args_name + '>\n' }}
                    {%- set args_value = args_value | tojson | safe if args_value is mapping or (args_value is sequence and args_value is not string) else args_value | string %}
                    {{- args_value }}
                    {{- '\n</parameter>\n' }}
                {%- endfor %}
            {%- endif %}
            {{- '</function>\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "user" or message.role == "system" or message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.previtem and loop.previtem.role != "tool" %}
            {{- '<|im_start|>user\n' }}
        {%- endif %}
        {{- '<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>\n' }}
        {%- if not loop.last and loop.nextitem.role != "tool" %}
            {{- '<|im_end|>\n' }}
        {%- elif loop.last %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"""

# Written for mistral_common 1.x's InstructTokenizerV3 (instruct.py): see the module docstring. `_json` writes a
# tool result or an arguments string as mistral_common's json.loads + json.dumps does, for the JSON it can
# recognise in Jinja: objects and arrays (as they are: json.dumps form assumed), integers and floats in their
# json.dumps form, true/false/null; any other text is a JSON string. "" is {}, as mistral_common makes it.
MISTRAL_V3 = r"""{%- macro _json(value) %}
    {%- if value is not string %}
        {{- value | tojson }}
    {%- elif value == '' %}
        {{- '{}' }}
    {%- elif value[:1] in ['{', '['] or value in ['true', 'false', 'null'] %}
        {{- value }}
    {%- else %}
        {%- set digits = value[1:] if value[:1] == '-' else value %}
        {%- if digits.isascii() and digits.isdigit() and (digits == '0' or digits[:1] != '0') and value != '-0' %}
            {{- value }}
        {%- elif value.strip('0123456789.eE+-') == '' and (value | float | string) == value %}
            {{- value }}
        {%- else %}
            {{- value | tojson }}
        {%- endif %}
    {%- endif %}
{%- endmacro %}
{%- macro _call_id(id) %}
    {%- if not (id is string and id | length == 9 and id.isascii() and id.isalnum()) %}
        {{- raise_exception('Tool call id was ' ~ id ~ ' but must be a-z, A-Z, 0-9, with a length of 9 (Mistral v3)') }}
    {%- endif %}
    {{- id | tojson }}
{%- endmacro %}
{%- set ns = namespace(system='', last_user=-1) %}
{%- for message in messages %}
    {%- if message['role'] == 'system' and message['content'] %}
        {%- set ns.system = ns.system + ('\n\n' if ns.system else '') + message['content'] %}
    {%- elif message['role'] == 'user' %}
        {%- set ns.last_user = loop.index0 %}
    {%- endif %}
{%- endfor %}
{{- bos_token }}
{%- for message in messages %}
    {%- if message['role'] == 'user' %}
        {%- if loop.index0 == ns.last_user and tools %}
            {{- '[AVAILABLE_TOOLS][' }}
            {%- for tool in tools %}
                {%- set f = tool['function'] if tool['function'] is defined else tool %}
                {{- '{"type": "function", "function": {"name": ' ~ (f['name'] | tojson) }}
                {{- ', "description": ' ~ ((f['description'] if f['description'] is defined and f['description'] is not none else '') | tojson) }}
                {{- ', "parameters": ' ~ ((f['parameters'] if f['parameters'] is defined and f['parameters'] is not none else {}) | tojson) ~ '}}' }}
                {%- if not loop.last %}{{- ', ' }}{%- endif %}
            {%- endfor %}
            {{- '][/AVAILABLE_TOOLS]' }}
        {%- endif %}
        {{- '[INST]' }}
        {%- if loop.index0 == ns.last_user and ns.system %}
            {{- ns.system + '\n\n' }}
        {%- endif %}
        {{- message['content'] + '[/INST]' }}
    {%- elif message['role'] == 'assistant' %}
        {%- if message['tool_calls'] is defined and message['tool_calls'] %}
            {%- if message['content'] %}
                {{- raise_exception('Mistral v3 cannot have tool calls and content in the same assistant message') }}
            {%- endif %}
            {{- '[TOOL_CALLS][' }}
            {%- for call in message['tool_calls'] %}
                {%- set f = call['function'] if call['function'] is defined else call %}
                {{- '{"name": ' ~ (f['name'] | tojson) ~ ', "arguments": ' ~ _json(f['arguments']) }}
                {%- if call['id'] is defined and call['id'] and call['id'] != 'null' %}
                    {{- ', "id": ' ~ _call_id(call['id']) }}
                {%- endif %}
                {{- '}' }}
                {%- if not loop.last %}{{- ', ' }}{%- endif %}
            {%- endfor %}
            {{- ']' + eos_token }}
        {%- else %}
            {{- message['content'].rstrip(' ') + eos_token }}
        {%- endif %}
    {%- elif message['role'] == 'tool' %}
        {{- '[TOOL_RESULTS]{"content": ' ~ _json(message['content']) ~ ', "call_id": ' ~ _call_id(message['tool_call_id']) ~ '}[/TOOL_RESULTS]' }}
    {%- endif %}
{%- endfor %}
"""
