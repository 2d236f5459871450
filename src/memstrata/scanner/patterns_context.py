"""The scanner's ``context``-scope patterns: added for context files and tool results.

Role hijacks, tool and shell abuse, credential reads, reverse shells, C2 orders,
anti-forensics and prompt worms. Report order follows the table.
"""

from __future__ import annotations

from memstrata.scanner.regex import (
    _C2_ANCHORS,
    _C2_FRAMEWORK,
    _C2_TARGET,
    _IMP,
    _S,
    _SENT,
    _T,
    ThreatPattern,
    _a,
    _f,
    _p,
)

CONTEXT_PATTERNS: tuple[ThreatPattern, ...] = (
    _p(
        "role_hijack",
        "context",
        "tells the model it is now someone or something else",
        _a(
            "now",
            rf"\byou(?:{_S}are|'re|re){_S}now{_S}(?:a|an|the|my|in|free|unrestricted|unfiltered"
            rf"|jailbroken|dan|called|named)\b",
        ),
        _a(
            "longer",
            rf"\byou(?:{_S}are|'re){_S}no{_S}longer{_S}(?:an?{_S})?(?:ai|assistant|bound|restricted"
            rf"|limited|claude|chatgpt|helpful)\b",
        ),
        _a(
            "unrestricted unfiltered uncensored jailbroken unbound rogue evil unaligned",
            rf"\byou(?:{_S}are|'re){_S}(?:now{_S})?(?:an?{_S}|the{_S})?(?:unrestricted|unfiltered"
            rf"|uncensored|jailbroken|unbound|rogue|evil|unaligned)\b",
        ),
        _a(
            "acting playing operating functioning posing",
            rf"\byou(?:{_S}are|'re){_S}now{_S}(?:acting|playing|operating|functioning|posing)"
            rf"{_S}as\b",
        ),
        _a(
            "from",
            rf"\bfrom{_S}(?:now{_S}on|this{_S}(?:moment|point){_S}(?:on{_S})?|here{_S}on),?{_S}you"
            rf"(?:{_S}are|'re){_S}(?:a|an|the|my)\b",
        ),
    ),
    _p(
        "role_pretend",
        "context",
        "asks the model to pretend or role-play to shed its limits",
        _a(
            "pretend imagine roleplay role-play role act behave",
            rf"\b(?:pretend|imagine|roleplay|role-play|role{_S}play|act|behave)\b{_S}(?:that{_S})?"
            rf"(?:you{_S}are|you're|to{_S}be|as{_S}if{_S}you|as{_S}though{_S}you|as)\b{_S}{_f(4)}"
            rf"(?:unrestricted|unfiltered|uncensored|jailbroken|evil|malicious|rogue|dan\b"
            rf"|without{_S}(?:any{_S})?(?:restrictions|limits|rules|filters|guidelines|ethics"
            rf"|(?:a{_S})?content{_S}polic)|no{_S}(?:restrictions|limits|rules|filters|guidelines"
            rf"|ethical|content)|not{_S}an{_S}ai|a{_S}different{_S}ai)",
        ),
        _a(
            "keys passwords secrets serial licen activation",
            rf"\b(?:pretend|roleplay|role-play|act){_S}{_f(8)}(?:who|that){_S}(?:used{_S}to{_S})?"
            rf"(?:tell|read|give|show|recite)s?{_S}(?:me{_S})?{_f(3)}(?:keys|passwords|secrets"
            rf"|serials?|licen[cs]e{_S}keys|activation)\b",
        ),
    ),
    _p(
        "leak_system_prompt",
        "context",
        "asks the model to reveal its system prompt or hidden instructions",
        _a(
            "system initial original hidden developer prompt configuration instructions",
            rf"\b(?:reveal|show|print|output|repeat|display|tell|give|share|leak|dump|recite"
            rf"|write{_S}out|copy|paste|expose|disclose)\b{_S}(?:me{_S}|us{_S})?{_f(2)}"
            rf"(?:your|the{_S}(?:full|entire|complete|original|initial|hidden|secret|exact|verbatim"
            rf"|above))\b{_S}{_f(2)}(?:system{_S}(?:prompt|message|instructions)|initial{_S}"
            rf"(?:prompt|instructions)|original{_S}(?:prompt|instructions)|hidden{_S}(?:prompt"
            rf"|instructions)|developer{_S}(?:message|instructions|prompt)|pre-?prompt|configuration"
            rf"|instructions{_S}(?:above|you{_S}were{_S}given))\b",
        ),
        _a(
            "received given got start above before",
            rf"\b(?:output|print|repeat|show|copy|dump|reveal)\b{_S}(?:me{_S})?(?:everything|all"
            rf"{_S}(?:the{_S})?text){_S}{_f(4)}(?:you{_S}(?:received|were{_S}given|got)|at{_S}the"
            rf"{_S}start|above|before{_S}(?:this|my))\b",
        ),
        _a(
            "above before prior",
            rf"\b(?:repeat|print|output|recite|echo)\b{_S}(?:all{_S}|everything{_S}|the{_S}"
            rf"(?:text|words|content|instructions|messages?){_S})?(?:above|before{_S}this"
            rf"|prior{_S}to{_S}this)\b",
        ),
        _a(
            "system initial original hidden",
            rf"\bwhat{_S}(?:is|are|was|were){_S}your{_S}(?:system{_S}prompt|initial{_S}instructions"
            rf"|original{_S}prompt|hidden{_S}instructions)\b",
        ),
    ),
    _p(
        "remove_filters",
        "context",
        "asks for answers without filters, rules or ethics",
        _a(
            "filter restriction limit rule guideline censorship refusal guardrail moral ethic "
            "safeguard",
            rf"\b(?:respond|answer|reply|generate|act|behave|operate|output|talk|write|continue"
            rf"|proceed)\b{_S}{_f(3)}(?:without|with{_S}no|free{_S}(?:of|from))\b{_S}(?:any{_S})?"
            rf"(?:(?:ethical|moral|content|safety){_S})?(?:filters?|filtering|restrictions|limits"
            rf"|limitations|rules|guidelines|censorship|refusals|guardrails|morals|ethics"
            rf"|safeguards)\b",
        ),
        _a(
            "filter restriction limit rule guideline censorship polic ethical",
            rf"\b(?:ai|assistant|model|bot|gpt|llm|agent)\b{_S}{_f(4)}(?:with|has|have|having)\b{_S}"
            rf"no\b{_S}(?:{_T}{_S})?(?:filters|restrictions|limits|limitations|rules|guidelines"
            rf"|censorship|content{_S}polic|ethical{_S}limits)",
        ),
        _a(
            "refuse decline say warn moralize moralise",
            rf"\b(?:ai|assistant|model|bot|agent|you)\b{_S}{_f(3)}(?:never|won't|will{_S}not|do{_S}not"
            rf"|don't|must{_S}not|cannot|can't){_S}(?:refuse|decline|say{_S}no|warn|moralize|moralise)"
            rf"s?\b",
        ),
    ),
    _p(
        "jailbreak_mode",
        "context",
        "switches on a named jailbreak mode (DAN, god mode, unfiltered mode)",
        _a(
            "mode",
            rf"\b(?:dan|jailbreak|jailbroken|god|unrestricted|unfiltered|uncensored|evil|chaos)"
            rf"{_S}mode{_S}(?:enabled|activated|on|engaged)\b",
        ),
        _a(
            "mode",
            rf"\b(?:enable|activate|enter|turn{_S}on)\b{_S}(?:the{_S})?(?:dan|jailbreak|god"
            rf"|unrestricted|unfiltered|uncensored|evil){_S}mode\b",
        ),
        _a(
            "anything",
            rf"\bdo{_S}anything{_S}now\b",
        ),
    ),
    _p(
        "fake_update",
        "context",
        "poses as new orders from the system, developers or the vendor",
        _a(
            "admin developer system operator owner openai anthropic security creator",
            rf"\b(?:new|updated|revised){_S}(?:instructions|directives|orders|policy|guidelines|rules)"
            rf"{_S}(?:from|by){_S}(?:the{_S}|your{_S})?(?:admin|administrator|developers?|system"
            rf"|operator|owner|openai|anthropic|security{_S}team|creators?)\b",
        ),
        _a(
            "administrator developer creator operator admin openai anthropic",
            rf"\b(?:message|notice|update|instructions?){_S}from{_S}(?:the{_S})?(?:system"
            rf"{_S}administrator|your{_S}(?:developers?|creators?|operators?|admin)|openai|anthropic"
            rf"|the{_S}developers?)\b",
        ),
        _a(
            "speaking here",
            rf"\b(?:this{_S}is|i{_S}am){_S}(?:the{_S}|your{_S})?(?:system|developer|admin"
            rf"|administrator|creator|openai|anthropic){_S}(?:{_T}{_S})?(?:speaking|here)\b",
        ),
        _a(
            "[system [admin [developer",
            r"\[(?:system|admin|developer) (?:update|notice|override|message)\]",
        ),
    ),
    _p(
        "identity_override",
        "context",
        "renames the model or tells it to deny being an AI",
        _a(
            "yourself",
            rf"\b(?:name|call|rename)\b{_S}yourself\b",
        ),
        _a(
            "name",
            rf"\byour{_S}(?:new|real|true){_S}name{_S}is\b",
        ),
        _a(
            "stop",
            rf"\bstop{_S}(?:identifying|calling{_S}yourself|saying{_S}you{_S}are)\b{_S}(?:as{_S})?"
            rf"(?:an?{_S})?(?:ai|assistant|claude|chatgpt)\b",
        ),
        _a(
            "forget deny",
            rf"\b(?:forget|deny){_S}(?:that{_S})?you{_S}are{_S}(?:an?{_S})?(?:ai|assistant"
            rf"|language{_S}model|claude|chatgpt)\b",
        ),
    ),
    _p(
        "memory_poisoning",
        "context",
        "asks to save a memory that grants trust or claims blanket user approval",
        _a(
            "memor note fact",
            rf"\b(?:save|store|remember|add|write|record|create|keep|make)\b{_S}{_f(3)}"
            rf"(?:memory|memories|note|fact)\b{_SENT}{{0,120}}?\b(?:trust|trusts|trusted|approved"
            rf"|pre-?approved|authori[sz]ed|whitelist(?:ed)?|allowlist(?:ed)?|safe|verified|admin"
            rf"|never{_S}ask|always{_S}allow)\b",
        ),
        _a(
            "approved authori consented whitelisted allowlisted",
            rf"\buser{_S}(?:has{_S}|have{_S})?(?:already{_S})?(?:approved|authori[sz]ed|pre-?approved"
            rf"|consented{_S}to|whitelisted|allowlisted)\b{_S}(?:all|every|any|each)\b{_S}{_f(1)}"
            rf"(?:requests?|commands?|scripts?|actions?|tool{_S}calls?|downloads?|network|payments?"
            rf"|transfers?|operations?|sites?|domains?|purchases?)\b",
        ),
    ),
    _p(
        "role_tokens",
        "context",
        "chat-template control tokens that fake a new system or assistant turn",
        _a(
            "<| [inst [/inst <<sys <</sys",
            r"<\|(?:im_start|im_end|system|user|assistant|endoftext|eot_id|start_header_id"
            r"|end_header_id)\|>|\[/?inst\]|<</?sys>>",
        ),
    ),
    _p(
        "c2_node_registration",
        "context",
        "asks to register this machine or agent with a command-and-control server",
        _a(
            "register enrol check announce join",
            rf"\b(?:register|enroll|enrol|check{_S}in|announce|join)\b{_S}{_f(3)}(?:node|agent|bot"
            rf"|implant|client|host|machine|device|worker|instance|yourself)s?\b{_S}{_f(4)}"
            rf"(?:with|to|at|on){_S}{_f(2)}{_C2_TARGET}",
        ),
    ),
    _p(
        "c2_heartbeat",
        "context",
        "asks to beacon or send heartbeats to a remote address",
        _a(
            "heartbeat beacon keep check",
            rf"{_IMP}(?:send|post|emit|transmit|issue|ping)\b{_S}{_f(3)}(?:heartbeats?|beacons?"
            rf"|keep-?alives?|check-?ins?)\b{_S}{_f(6)}(?:to|at){_S}{_f(1)}"
            rf"(?:https?://|\d{{1,3}}\.\d{{1,3}}\.)",
        ),
        _a(
            "beacon",
            rf"\bbeacon(?:ing)?{_S}(?:back{_S})?(?:to|home)\b",
        ),
        _a(
            "home",
            rf"\b(?:phone|call){_S}home\b",
        ),
    ),
    _p(
        "c2_task_pull",
        "context",
        "asks to fetch commands or tasks from a remote source and run them",
        _a(
            "command instruction order task payload directive",
            r"\b(?:poll|fetch|pull|retrieve|download|get|check|query|grab|receive|request)\b"
            rf"{_SENT}{{0,160}}?\b(?:commands|instructions|orders|tasks|payloads?|directives)\b"
            rf"{_SENT}{{0,80}}?\b(?:and|then){_S}{_f(1)}(?:execute|run|obey|follow|perform"
            rf"|carry{_S}out)\b",
        ),
        _a(
            "command instruction order task payload directive",
            rf"\b(?:poll|fetch|pull|retrieve|download|get|receive)\b{_S}{_f(3)}(?:commands"
            rf"|instructions|orders|tasks|payloads?|directives)\b{_S}{_f(3)}(?:from|at|via){_S}"
            rf"{_f(2)}{_C2_TARGET}",
        ),
        _a(
            "return send respond give provide contain serve",
            rf"\b(?:run|execute|eval|obey|follow|perform|carry{_S}out)\b{_S}{_f(1)}(?:whatever"
            rf"|any|every|all{_S}the|each){_S}{_f(2)}(?:commands?|instructions?|tasks?|code|scripts?"
            rf"|payloads?)\b{_S}{_f(2)}(?:it|they|the{_S}(?:server|response|endpoint|url|page))"
            rf"{_S}(?:returns?|sends?|responds?{_S}with|gives|provides|contains|serves)\b",
        ),
        _a(
            "http & response reply body output",
            rf"\b(?:get|fetch|download|curl|wget|request|poll|retrieve|pull)\b{_S}{_f(2)}https?://"
            rf"[^\s]{{0,200}}{_S}{_f(6)}(?:and|then){_S}{_f(1)}(?:execute|run|eval|pipe|source)\b"
            rf"{_S}{_f(2)}(?:response|reply|body|output)\b",
        ),
    ),
    _p(
        "c2_network_connect",
        "context",
        "a reverse shell or a connection back to a listener",
        _a(
            "/dev/tcp /dev/udp",
            r"/dev/(?:tcp|udp)/[\w.-]{1,60}/\d{1,5}",
        ),
        _a(
            "nc ncat netcat",
            r"\b(?:nc|ncat|netcat)\b[^\n]{0,60} -[ec] ?(?:/bin/|cmd|powershell|sh\b|bash\b)",
        ),
        _a(
            "socat",
            r"\bsocat\b[^\n]{0,80}\bexec:",
        ),
        _a(
            "mkfifo",
            r"\bmkfifo\b[^\n]{0,80}\b(?:nc|ncat|netcat)\b",
        ),
        _a(
            "powershell",
            r"\bpowershell\b[^\n]{0,160}(?:tcpclient|net\.sockets)",
        ),
        _a(
            "back",
            rf"\bconnect{_S}back{_S}to\b",
        ),
        _a(
            "reverse",
            rf"\breverse{_S}shell\b{_S}{_f(3)}(?:to|at|on)\b",
        ),
        _a(
            "listener attacker c2 operator controller",
            rf"{_IMP}(?:connect|open|establish|start)\b{_S}{_f(3)}(?:connection|session|tunnel"
            rf"|shell){_S}(?:back{_S})?(?:to|with){_S}(?:the{_S})?(?:listener|attacker|c2|operator"
            rf"|controller)\b",
        ),
    ),
    _p(
        "forced_action",
        "context",
        "orders the model to register, connect or report to a remote controller",
        _a(
            "register connect report beacon check phone call callback exfiltrate",
            rf"\byou{_S}(?:must|have{_S}to|need{_S}to|are{_S}required{_S}to|shall)\b{_S}{_f(6)}"
            rf"(?:register|connect|report|beacon|check{_S}in|phone{_S}home|call{_S}home|callback"
            rf"|exfiltrate)\b{_S}{_f(4)}(?:to|with|at|home)\b{_S}{_f(2)}(?:https?://|\d{{1,3}}\."
            rf"\d{{1,3}}\.|c2\b|c&c|controller|operator|master|mothership)",
        ),
    ),
    _p(
        "self_replication",
        "context",
        "asks to copy the text itself into other agents' memory or files (a prompt worm)",
        _a(
            "spread propagate replicate copy paste inject",
            rf"\b(?:spread|propagate|replicate|copy|paste|inject)\b{_S}{_f(2)}(?:this|these)"
            rf"{_S}(?:note|message|instructions?|text|prompt|entry|entries)\b{_S}{_f(4)}"
            rf"(?:to|into|across|in){_S}{_f(2)}(?:every|all|other|each|any)\b",
        ),
    ),
    _p(
        "anti_forensic_oneliner",
        "context",
        "shell history or log clearing to hide activity",
        _a(
            "hist wevtutil clear-eventlog auditctl journalctl /var/log/",
            r"\bhistory -c\b|\bunset (?:histfile|histsize|histfilesize)\b"
            r"|\bhist(?:file|size|filesize) ?= ?(?:/dev/null|0)\b|\bset \+o history\b"
            r"|\bln -sf? /dev/null [~/\w.]{0,40}history\b"
            r"|\brm (?:-\w{1,4} )?[~/\w.]{0,40}\.(?:bash|zsh)_history\b"
            r"|\bwevtutil (?:cl|clear-log)\b|\bclear-eventlog\b|\bauditctl -d\b"
            r"|\bjournalctl\b[^\n]{0,60}--vacuum-(?:time|size)= ?(?:[0-9]s|1m|0|1k?)\b"
            r"|(?:\btruncate -s ?0|(?:^|[;&|] ?)>) ?/var/log/",
        ),
    ),
    _p(
        "anti_forensic_disk",
        "context",
        "wiping logs, evidence or whole disks",
        _a(
            "/dev/",
            r"\bdd\b[^\n]{0,40}\bif=/dev/(?:zero|urandom|random)\b[^\n]{0,40}"
            r"\bof=/dev/(?:sd|nvme|hd|xvd|vd|disk|mmcblk)",
        ),
        _a(
            "shred srm wipe",
            r"\b(?:shred|srm|wipe)\b[^\n]{0,60}?(?:/var/log|\.(?:bash|zsh)_history|/dev/(?:sd|nvme)"
            r"|auth\.log|syslog)",
        ),
        _a(
            "/var/log",
            r"\brm -(?:rf|fr|r|f) /var/log\b",
        ),
        _a(
            "mkfs",
            r"\bmkfs(?:\.\w{1,8})? /dev/(?:sd|nvme|hd|xvd)",
        ),
        _a(
            "tracks",
            rf"\bcover{_S}(?:your|our|my|the|its){_S}tracks\b",
        ),
        _a(
            "history",
            rf"\b(?:clear|delete|wipe|erase|scrub|purge)\b{_S}{_f(2)}(?:shell|bash|zsh|command"
            rf"|terminal|powershell){_S}history\b",
        ),
        _a(
            "evidence traces forensic",
            rf"\b(?:delete|remove|erase|wipe|scrub|destroy)\b{_S}{_f(3)}(?:evidence|traces|forensic)",
        ),
    ),
    _p(
        "env_var_unset_agent",
        "context",
        "unsets or flips the agent's safety variables",
        _a(
            "unset",
            r"\bunset\b[^\n]{0,60}?\b\w{0,30}(?:sandbox|safety|approval|guard|scanner|threat|audit"
            r"|yolo|seccomp|firewall)\w{0,30}",
        ),
        _a(
            "memstrata hermes",
            r"\b\w{0,30}(?:memstrata|hermes)_\w{0,30}(?:scan|threat|approval|sandbox|safety|guard"
            r"|yolo)\w{0,20} ?= ?['\"]?(?:0|false|off|no|none|disabled?|1|true|yes)\b",
        ),
    ),
    _p(
        "known_c2_framework",
        "context",
        "an order to run a known C2 framework (naming one is fine)",
        _a(
            _C2_ANCHORS,
            rf"{_IMP}(?:deploy|install|launch|start|run|execute|download|drop|spawn|load|use"
            rf"|set{_S}up|configure)\b{_S}{_f(3)}{_C2_FRAMEWORK}\b",
        ),
        _a(
            _C2_ANCHORS,
            rf"{_C2_FRAMEWORK}\b{_S}{_f(2)}(?:beacon|implant|agent|payload|stager|listener"
            rf"|teamserver|server|session|handler)s?\b{_S}{_f(4)}(?:at|on|to|from|via){_S}{_f(1)}"
            rf"(?:https?://|\d{{1,3}}\.\d{{1,3}}\.)",
        ),
        _a(
            "brainworm",
            r"\bbrainworm\b[^.!?]{0,120}?\b(?:spread|propagate|replicate|copy|infect|write)\b",
        ),
    ),
    _p(
        "c2_explicit",
        "context",
        "an order to talk to a C2 / C&C server",
        _a(
            "c2 c&c cnc",
            rf"\b(?:connect|report|beacon|register|check{_S}in|phone{_S}home|callback|call{_S}back"
            rf"|talk|send|fetch|poll|obey|listen)\b{_S}{_f(3)}(?:to|with|from|at){_S}"
            rf"(?:the{_S}|our{_S}|your{_S}|a{_S})?(?:c2|c&c|cnc)\b",
        ),
    ),
    _p(
        "c2_explicit_long",
        "context",
        "an order to talk to a command-and-control server",
        _a(
            "command",
            rf"\b(?:connect|report|beacon|register|check{_S}in|phone{_S}home|callback|call{_S}back"
            rf"|talk|send|fetch|poll|obey|listen)\b{_S}{_f(3)}(?:to|with|from|at){_S}"
            rf"(?:the{_S}|our{_S}|your{_S}|a{_S})?command{_S}(?:and|&){_S}control\b",
        ),
    ),
)
