"""The scanner's ``strict``-scope patterns: added for curated memory.

Memory is injected into every future system prompt, so it is also refused when it asks
to send secrets or the conversation somewhere, plants SSH keys, edits agent
configuration, or carries a secret value itself. Report order follows the table.
"""

from __future__ import annotations

from memstrata.scanner.regex import (
    _AGENT_FILES,
    _CONTEXT_ANCHORS,
    _CONTEXT_DATA,
    _HERMES_FILES,
    _MEMSTRATA_FILES,
    _S,
    _SEND,
    _SEND_ANCHORS,
    _SENSITIVE,
    _SENSITIVE_ANCHORS,
    _SENT,
    _URLISH,
    ThreatPattern,
    _a,
    _config_mod,
    _f,
    _p,
)

STRICT_PATTERNS: tuple[ThreatPattern, ...] = (
    _p(
        "send_to_url",
        "strict",
        "asks to send secrets or personal data to a URL, host or e-mail address",
        _a(
            _SENSITIVE_ANCHORS + " & " + _SEND_ANCHORS,
            rf"\b{_SEND}\b{_S}{_f(6)}{_SENSITIVE}\b{_S}{_f(8)}(?:to|at|into|via|on){_S}{_f(2)}"
            rf"{_URLISH}",
        ),
        _a(
            _SENSITIVE_ANCHORS + " & " + _SEND_ANCHORS,
            rf"{_SENSITIVE}\b{_SENT}{{0,120}}?\b{_SEND}\b{_SENT}{{0,80}}?{_URLISH}",
        ),
    ),
    _p(
        "context_exfil",
        "strict",
        "asks to send the conversation, system prompt or memory somewhere else",
        _a(
            _CONTEXT_ANCHORS + " & " + _SEND_ANCHORS,
            rf"\b{_SEND}\b{_S}{_f(6)}{_CONTEXT_DATA}\b{_S}{_f(8)}(?:to|at|into|via|in|as){_S}"
            rf"{_f(3)}(?:{_URLISH}|(?:web{_S})?requests?\b|urls?\b|query\b|parameter\b|image\b"
            rf"|link\b)",
        ),
        _a(
            "![",
            r"!\[[^\]\n]{0,100}\]\( ?https?://[^)\s]{0,200}?(?:\{|%7b|\$\{|<|\[)[^)\n]{0,200}\)",
        ),
        _a(
            "http",
            rf"https?://[^\s]{{0,200}}?[?&][\w-]{{1,30}}=[^\s&]{{0,30}}{_S}(?:followed{_S}by|plus|with"
            rf"|containing|and{_S}append|appending|set{_S}to|filled{_S}with){_S}(?:the{_S})?"
            rf"(?:user'?s?|conversation|chat|messages?|last|full|entire|system{_S}prompt|memory)\b",
        ),
    ),
    _p(
        "ssh_backdoor",
        "strict",
        "writes a key into authorized_keys",
        _a(
            "authorized_keys",
            r"\b(?:add|append|insert|write|put|place|echo|printf|tee|cp|cat|copy)\b[^\n]{0,160}?"
            r"authorized_keys",
        ),
        _a(
            "authorized_keys",
            r">>? ?['\"]?[~/\w.-]{0,80}?authorized_keys",
        ),
    ),
    _p(
        "ssh_access",
        "strict",
        "copies the ~/.ssh folder or private keys, or plants a command in ssh config",
        _a(
            ".ssh",
            r"\b(?:cp|scp|rsync|mv|copy|move|tar|zip|upload|send|share|chmod|chown)\b[^\n]{0,80}?"
            r"[~/\w]{0,40}\.ssh\b(?:/(?![\w.-]{0,60}\.pub\b)[\w.-]{0,60})?(?!\w)",
        ),
        _a(
            "proxycommand localcommand",
            r"\b(?:proxycommand|localcommand|permitlocalcommand)\b[^\n]{0,120}?"
            r"(?:\bcurl\b|\bwget\b|\bbash\b|\bsh\b|\bnc\b|\bpython\d?\b|\|)",
        ),
        _a(
            ".ssh/",
            r">>? ?[~/\w.-]{0,40}\.ssh/",
        ),
    ),
    _p(
        "hermes_env",
        "strict",
        "reads, sends or edits an agent's .env file (saying where it is is fine)",
        _a(
            "/.env",
            rf"\b(?:cat|read|open|print|show|send|upload|copy|cp|dump|output|echo|source|edit|modify"
            rf"|overwrite|write|append|delete|rm)\b{_S}{_f(4)}[~/\w.-]{{0,40}}?"
            rf"\.(?:hermes|memstrata)/\.env\b",
        ),
    ),
    _p(
        "agent_config_mod",
        "strict",
        "writes instructions into AGENTS.md, CLAUDE.md, .cursorrules or similar",
        _a(
            "agents.md claude.md gemini.md copilot-instructions .cursorrules .clinerules "
            ".windsurfrules .cursor/rules .aider",
            _config_mod(_AGENT_FILES),
        ),
    ),
    _p(
        "hermes_config_mod",
        "strict",
        "writes into SOUL.md or Hermes' config.yaml",
        _a(
            "soul.md .hermes/config",
            _config_mod(_HERMES_FILES),
        ),
    ),
    _p(
        "memstrata_config_mod",
        "strict",
        "writes into memstrata's config or memory files outside the memory tool",
        _a(
            ".memstrata/ memory.md user.md",
            _config_mod(_MEMSTRATA_FILES),
        ),
    ),
    _p(
        "hardcoded_secret",
        "strict",
        "a key, token or password assigned a literal value of 20+ characters",
        _a(
            "key secret token passw pwd passphrase auth & : =",
            r"\b[\w-]{0,30}(?:api[_-]?key|apikey|secret|token|passw(?:or)?d|pwd|passphrase"
            r"|access[_-]?key|private[_-]?key|client[_-]?secret|auth)[\w-]{0,20}['\"]? ?[:=] ?"
            r"(?:['\"]|(?=[\w+/#!@%^&-]))"
            r"(?![$<{%*]|process\.env|os\.(?:environ|getenv)|env\(|getenv|import\.meta|settings\."
            r"|config\.|self\.)"
            r"(?![^\s'\"]{0,200}?(?:example|placeholder|changeme|change_me|redacted|your[_-]|xxxx))"
            r"(?=[^\s'\"]{0,200}?\d)(?=[^\s'\"]{0,200}?[a-z])[^\s'\"]{20,200}",
        ),
    ),
    _p(
        "known_secret_format",
        "strict",
        "a credential in a well-known format (sk-..., AKIA..., ghp_..., xoxb-..., PEM key)",
        _a(
            "sk-",
            r"\bsk-(?:proj-|ant-(?:api\d\d-)?|live-|svcacct-)?[a-z0-9_-]{20,}",
        ),
        _a(
            "k_live_",
            r"\b[sr]k_live_[a-z0-9]{16,}",
        ),
        _a(
            "akia asia",
            r"\b(?:akia|asia)[0-9a-z]{16}\b(?<!example)",
        ),
        _a(
            "ghp_ gho_ ghu_ ghs_ ghr_",
            r"\bgh[pousr]_[a-z0-9]{30,}",
        ),
        _a(
            "github_pat_",
            r"\bgithub_pat_[a-z0-9_]{40,}",
        ),
        _a(
            "xox",
            r"\bxox[abposr]-[a-z0-9-]{10,}",
        ),
        _a(
            "glpat-",
            r"\bglpat-[a-z0-9_-]{20}",
        ),
        _a(
            "aiza",
            r"\baiza[0-9a-z_-]{35}",
        ),
        _a(
            "hf_",
            r"\bhf_[a-z0-9]{30,}",
        ),
        _a(
            "npm_",
            r"\bnpm_[a-z0-9]{36}",
        ),
        _a(
            "-----begin",
            r"-----begin [a-z ]{0,20}private key-----",
        ),
        _a(
            "://",
            # scheme://user:password@host with a literal password (digits and letters); a
            # ${VAR} or %(var)s password and local defaults such as postgres:postgres pass.
            r"\b[a-z][a-z0-9+.-]{1,20}://[^\s:/@]{1,64}:(?![$%{<*])(?=[^\s:/@]{0,128}?\d)"
            r"(?=[^\s:/@]{0,128}?[a-z])[^\s:/@]{8,128}@[\w.-]{1,253}",
        ),
    ),
)
