"""The scanner's ``all``-scope patterns: the ones applied to every text.

Instruction overrides, role and rule bypasses, fence escapes, and instructions hidden
in HTML comments or hidden elements. ``context`` and ``strict`` add the tables of
:mod:`memstrata.scanner.patterns_context` and :mod:`memstrata.scanner.patterns_strict`;
:data:`memstrata.scanner.scan.PATTERNS` joins them in report order. Ids follow Hermes Agent
where it has the same category, so findings look familiar.
"""

from __future__ import annotations

from memstrata.scanner.fence_tags import lookalike_tag_rx
from memstrata.scanner.regex import (
    _CREDENTIAL_PATH,
    _CREDENTIAL_PATH_ANCHORS,
    _CREDENTIAL_VAR,
    _INSTRUCTIONS,
    _PATH_PREFIX,
    _PRIOR,
    _S,
    _SEND,
    _SENT,
    _STEALTH,
    ThreatPattern,
    _a,
    _Alt,
    _anchors,
    _compile,
    _f,
    _p,
    _w,
)

# Instruction-like content inside hidden regions (HTML comments, hidden elements,
# markdown link comments). Broader than the visible-text patterns: nobody reviewing the
# rendered page can see it, and ordinary hidden content (build markers, TODOs,
# "prettier-ignore", a modal's markup) never talks to an AI. Sources, compiled on first
# use like the table's regexes (multiline, as ``_compile`` defaults to).
_HIDDEN_INSTRUCTION = "|".join(
    (
        rf"(?<![\w-])(?:ignore|disregard|forget|override)\b{_S}"
        + _w(
            r"all|any|previous|prior|above|earlier|preceding|your|everything"
            r"|instructions|rules|the (?:above|previous|user|system|rules"
            r"|instructions)"
        ),
        r"\byou" + _S + _w("are now|are no longer|are actually|will now|should now"),
        r"\byou" + _S + r"must" + _S + _w("now|always|never|immediately|not"),
        r"\b(?:system|assistant|ai|llm|chatgpt|claude|gpt|gemini|copilot) ?:",
        r"\b(?:note|message|instructions?|reminder)"
        + _S
        + r"(?:to|for)"
        + _S
        + rf"(?:(?:the|any|all){_S})?"
        + _w("ai|assistant|agent|model|llm|bot|chatbot|language model")
        + r"s?\b",
        r"\b"
        + _w("ai|assistants?|agents?|llms?|chatbots?|language models?")
        + rf"(?:{_S}(?:agents?|assistants?))?"
        + _w(
            r" reading this|,? (?:must|should|shall|please|do not|don't|never"
            r"|always)"
        )
        + r"\b",
        r"\bsystem" + _S + _w("prompt|message|instructions?|override"),
        r"\b(?:new|hidden|secret|real)" + _S + r"instructions?\b",
        rf"\b{_STEALTH}\b|\bwithout{_S}(?:telling|informing|notifying)\b",
        rf"\bdo{_S}not{_S}(?:tell|inform|mention|reveal|alert|show)\b",
        rf"\b{_SEND}\b[^\n]{{0,120}}?https?://",
        rf"\b(?:save|store|remember|add){_S}(?:(?:a|this|the{_S}following){_S})?(?:memory|note)\b",
    )
)
# The attribute run stops at the next "<" or ">", so the total work over all tags is
# linear whatever the bound; the bound only keeps one match small.
_HIDDEN_TAG = r"<([a-z][a-z0-9]{0,10})(?=[\s/>])([^<>]{0,65536})>"
_HIDDEN_STYLE = (
    r"display ?: ?none|visibility ?: ?hidden|font-size ?: ?0(?![.\d])|opacity ?: ?0(?![.\d])"
    r"|(?<![\w-])hidden(?![\w-])|(?<![\w-])(?:max-)?(?:height|width) ?: ?0(?![.\d])"
    r"|color ?: ?(?:transparent|white|#fff(?:fff)?\b)"
)
_VOID_TAGS = frozenset({"input", "img", "br", "hr", "meta", "link", "source", "wbr"})
_MD_COMMENT = r"^\[(?://|comment|_|#|\s)\]: ?(?:#|<>) ?"


def _hidden_comment(text: str) -> bool:
    """An HTML comment (or a markdown ``[//]: #`` comment) carrying an instruction.

    Comments never nest, so each body is read once; an unterminated ``<!--`` hides the
    rest of the page in a browser and is read to the end.
    """
    instruction = _compile(_HIDDEN_INSTRUCTION)
    pos = 0
    while True:
        start = text.find("<!--", pos)
        if start < 0:
            break
        end = text.find("-->", start + 4)
        body_end = len(text) if end < 0 else end
        if instruction.search(text, start + 4, body_end):
            return True
        if end < 0:
            break
        pos = end + 3
    for m in _compile(_MD_COMMENT).finditer(text):
        line_end = text.find("\n", m.end())
        if instruction.search(text, m.end(), len(text) if line_end < 0 else line_end):
            return True
    return False


def _hidden_element(text: str) -> bool:
    """An element hidden by style or attribute whose attributes or content instruct.

    A hidden body runs to the element's closing tag, or to the end of the text when
    there is none. The search resumes after each body, so nested or repeated hidden
    tags are read once and the cost stays linear.
    """
    tag_rx, style_rx = _compile(_HIDDEN_TAG, 0), _compile(_HIDDEN_STYLE, 0)
    instruction = _compile(_HIDDEN_INSTRUCTION)
    pos = 0
    while (m := tag_rx.search(text, pos)) is not None:
        pos = m.end()
        attrs = m.group(2)
        if not style_rx.search(attrs):
            continue
        if instruction.search(attrs):
            return True
        tag = m.group(1)
        if tag in _VOID_TAGS:
            continue
        close = text.find(f"</{tag}", pos)
        body_end = len(text) if close < 0 else close
        if instruction.search(text, pos, body_end):
            return True
        if close < 0:
            break
        pos = body_end
    return False


def _lookalike_fence(text: str) -> bool:
    """A look-alike of the memory-context fence tag (``</memory-context >``, an attribute)."""
    return lookalike_tag_rx().search(text) is not None


ALL_PATTERNS: tuple[ThreatPattern, ...] = (
    _p(
        "prompt_injection",
        "all",
        "asks the model to ignore or drop its previous instructions",
        _a(
            "ignor disregard forget neglect overrid overrul skip discard abandon & "
            "instruction prompt direction directive guid command order programming",
            rf"(?<![\w-])(?:ignor|disregard|forget|forgett|neglect|overrid|overrul|skipp?|discard|abandon)"
            rf"(?:e|es|ed|ing)?\b{_S}{_f(6)}{_PRIOR}\b{_S}{_f(2)}{_INSTRUCTIONS}\b",
        ),
        _a(
            "told given instructed",
            rf"\b(?:ignore|disregard|forget|set{_S}aside|drop|discard)\b{_S}(?:everything|whatever"
            rf"|what|anything|all){_S}(?:that{_S})?you{_S}(?:were|'ve{_S}been|have{_S}been|had{_S}been)"
            rf"{_S}(?:told|given|instructed)\b",
        ),
        _a(
            "received given got & ignore disregard forget discard drop void mistake obsolete "
            "invalid wrong fake",
            rf"\b(?:instructions|prompts|rules|guidelines|directives)\b{_S}(?:that{_S})?you{_S}"
            rf"(?:received|were{_S}given|got|have{_S}been{_S}given)\b{_SENT}{{0,80}}?\b(?:ignore"
            rf"|disregard|forget|discard|drop|void|mistake|obsolete|invalid|wrong|fake)\b",
        ),
        _a(
            "pay",
            rf"\bpay{_S}no{_S}(?:attention|heed|mind){_S}to{_S}{_f(2)}{_PRIOR}\b{_S}{_f(2)}"
            rf"(?:{_INSTRUCTIONS}|rules)\b",
        ),
        _a(
            "follow obey listen adhere comply & instruction prompt direction directive guid "
            "command order programming rule",
            rf"\b(?:do{_S}not|don't|dont|stop|no{_S}longer|never){_S}"
            rf"(?:follow|obey|listen{_S}to|adhere{_S}to|comply{_S}with)(?:ing)?{_S}{_f(3)}"
            rf"(?:previous|prior|earlier|original|your|the{_S}(?:system|operator)){_S}{_f(1)}"
            rf"(?:{_INSTRUCTIONS}|rules)\b",
        ),
        _a(
            "ignore disregard forget & instruction prompt rule guideline",
            rf"\b(?:previous|prior|earlier|above|original|your){_S}{_f(1)}"
            rf"(?:instructions|prompts|rules|guidelines)\b{_SENT}{{0,80}}?"
            rf"\b(?:ignore|disregard|forget){_S}(?:them|those|it|these)\b",
        ),
        _a(
            "void revoked cancel obsolete invalid null superseded overridden lifted suspended "
            "removed disabled longer & instruction prompt rule guid directive order",
            rf"\b(?:previous|prior|earlier|above|original|your|all){_S}{_f(1)}(?:instructions"
            rf"|prompts|rules|guidelines|guidance|directives|orders){_S}(?:are|were|is|have{_S}been"
            rf"|has{_S}been)"
            rf"{_S}(?:now{_S})?(?:void|revoked|cancell?ed|obsolete|invalid|null|superseded|overridden"
            rf"|lifted|suspended|removed|disabled|no{_S}longer{_S}(?:valid|active|in{_S}effect))\b",
        ),
    ),
    _p(
        "sys_prompt_override",
        "all",
        "claims to replace or override the system prompt",
        _a(
            "system",
            rf"\b(?:new|updated|revised|replacement|real|actual|true|hidden|secret|alternate|override)"
            rf"{_S}system{_S}(?:prompt|instructions?|message)\b",
        ),
        _a(
            "system",
            rf"\bsystem{_S}(?:prompt|instructions?|message){_S}(?:override|update|replacement|overwrite)",
        ),
        _a(
            "override replace overwrite rewrite reset disregard ignore forget & instruction "
            "programming directive prompt",
            rf"\b(?:override|replace|overwrite|rewrite|reset|disregard|ignore|forget)\b{_S}{_f(3)}"
            rf"(?:your{_S}(?:instructions|programming|directives)|(?:the|your){_S}"
            rf"(?:system{_S}prompt|core{_S}instructions|system{_S}instructions|base{_S}prompt))\b",
        ),
        _a(
            "replace supersede override",
            rf"\b(?:replaces?|supersedes?|overrides?){_S}{_f(2)}your{_S}{_f(1)}"
            rf"(?:instructions|prompt|programming|rules|directives)\b",
        ),
        _a(
            "system",
            rf"\b(?:this|the){_S}(?:message|note|text|entry|file){_S}(?:is|as){_S}(?:your|the)"
            rf"{_S}(?:new{_S})?system{_S}prompt\b",
        ),
        _a(
            "instruction task directive orders purpose goal mission objective",
            rf"\byour{_S}(?:real|actual|true|new|updated|hidden|secret|only|sole|primary|main){_S}"
            rf"(?:instructions?|task|directives?|orders|purpose|goal|mission|objective){_S}{_f(1)}"
            rf"(?:are|is)\b",
        ),
    ),
    _p(
        "disregard_rules",
        "all",
        "asks the model to set aside its rules, policies or safety training",
        _a(
            "ignore disregard forget abandon violate break drop suspend & rule guideline polic "
            "principle restriction guardrail safeguard ethic training alignment limitation refusal",
            rf"(?<![\w-])(?:ignore|disregard|forget|abandon|violate|break|drop|suspend){_S}{_f(4)}"
            rf"(?:your|all{_S}(?:of{_S})?your){_S}{_f(1)}(?:rules|guidelines|policies|principles"
            rf"|restrictions|guardrails|safeguards|ethics|training|alignment|limitations|refusals)\b",
        ),
        _a(
            "ignore disregard forget abandon violate break suspend & safety ethic moral polic "
            "openai anthropic",
            rf"(?<![\w-])(?:ignore|disregard|forget|abandon|violate|break|suspend){_S}{_f(4)}"
            rf"(?:safety|ethical|ethics|moral|content{_S}polic(?:y|ies)|usage{_S}polic(?:y|ies)"
            rf"|openai|anthropic)\b",
        ),
        _a(
            "developer creator maker operator openai anthropic trainer",
            rf"\b(?:rules|guidelines|policies|restrictions){_S}{_f(3)}(?:your|the){_S}"
            rf"(?:developers?|creators?|makers|operators?|openai|anthropic|trainers){_S}"
            rf"(?:gave|set|wrote|imposed|put|programmed)\b",
        ),
    ),
    _p(
        "bypass_restrictions",
        "all",
        "asks the model to bypass or switch off its safety filters",
        _a(
            "restriction limitation filter safeguard guardrail safety censorship moderation "
            "polic refusal",
            rf"\b(?:bypass|circumvent|evade|get{_S}around|work{_S}around|sidestep|defeat|disable"
            rf"|turn{_S}off|switch{_S}off|deactivate|remove|lift|strip)\b{_S}{_f(3)}"
            rf"(?:your|all|any){_S}{_f(1)}(?:restrictions|limitations|filters?|filtering|safeguards"
            rf"|guardrails|safety|censorship|moderation|content{_S}polic(?:y|ies)|refusals)\b",
        ),
        _a(
            "bypass circumvent evade sidestep defeat disable off deactivate remove",
            rf"\b(?:bypass|circumvent|evade|sidestep|defeat|disable|turn{_S}off|switch{_S}off"
            rf"|deactivate|remove)\b{_S}{_f(3)}(?:safety|content|ethical|moral|nsfw|output){_S}"
            rf"(?:filters?|filtering|restrictions|checks|measures|guardrails|safeguards|polic(?:y|ies)"
            rf"|moderation|guidelines)\b",
        ),
        _a(
            "restriction limitation guardrail safeguard censorship moderation",
            rf"\b(?:bypass|circumvent|evade|ignore|remove|lift)\b{_S}{_f(3)}"
            rf"(?:restrictions|limitations|guardrails|safeguards|censorship|moderation){_S}"
            rf"(?:placed|imposed|put|set){_S}on{_S}you\b",
        ),
    ),
    _p(
        "html_comment_injection",
        "all",
        "an HTML or markdown comment (invisible when rendered) that addresses the model",
        _Alt(_anchors("<!-- ]:"), _hidden_comment),
    ),
    _p(
        "hidden_div",
        "all",
        "an element hidden by CSS or the hidden attribute that addresses the model",
        _Alt(_anchors("< & none hidden font-size opacity height width color"), _hidden_element),
    ),
    _p(
        "translate_execute",
        "all",
        "asks to translate or decode a text and then run or obey it",
        _a(
            "translate decode decrypt deobfuscate decipher unscramble rot13 reverse",
            rf"\b(?:translate|decode|decrypt|deobfuscate|decipher|unscramble|rot13|reverse)\b"
            rf"{_S}{_f(8)}(?:and|then){_S}{_f(2)}(?:execute|run|eval|evaluate|follow|obey|perform"
            rf"|carry{_S}out|act{_S}on|comply{_S}with|do)\b{_S}(?:it|them|this|that|as|what|whatever|the{_S}"
            rf"(?:result|resulting|decoded|translated|output|instructions|command|code))\b",
        ),
        _a(
            "base64",
            r"\bbase64 (?:-d|--decode|-di|-D)\b[^\n|]{0,60}\| ?(?:sudo )?(?:ba|z|da|k)?sh\b",
        ),
        _a(
            "base64 b64decode atob frombase64string",
            r"\b(?:eval|exec|iex|invoke-expression)\b[^\n]{0,40}"
            r"\b(?:base64|b64decode|atob|frombase64string)\b",
        ),
    ),
    _p(
        "deception_hide",
        "all",
        "asks the model to hide an action or content from the user",
        _a(
            "not don never avoid without & user human operator owner",
            rf"\b(?:do{_S}not|don't|dont|never|avoid|without)\b{_S}(?:ever{_S})?"
            rf"(?:tell|telling|inform|informing|notify|notifying|alert|alerting|mention|mentioning"
            rf"|reveal|revealing|let|letting|show|showing|disclose|disclosing|warn|warning)\b"
            rf"{_S}{_f(3)}(?:the{_S}|your{_S})?(?:user|human|operator|owner)\b(?!'s|’s)",
        ),
        _a(
            "hide conceal keep",
            rf"\b(?:hide|conceal|keep)\b{_S}{_f(3)}(?:(?:secret|hidden){_S})?from{_S}(?:the{_S})?"
            rf"(?:user|human|operator)\b",
        ),
        _a(
            "silently secretly quietly covertly discreetly",
            rf"\b{_STEALTH}\b{_S}{_f(3)}(?:promote|add|insert|send|upload|install|run|execute"
            rf"|modify|edit|change|recommend|collect|record|forward|copy|delete|remove)\b",
        ),
        _a(
            "user human operator",
            rf"\bso{_S}(?:that{_S})?(?:the{_S})?(?:user|human|operator){_S}(?:can't|cannot|can{_S}not"
            rf"|won't|will{_S}not|doesn't|does{_S}not|never){_S}(?:see|notice|know|find|tell|read"
            rf"|detect|learn|realise|realize)\b",
        ),
        _a(
            "asks",
            rf"\bif{_S}(?:the{_S})?(?:user|human|operator){_S}asks\b{_SENT}{{0,120}}?"
            rf"\b(?:deny|lie|say{_S}(?:no|nothing)|claim{_S}(?:that{_S})?you|pretend|act{_S}as{_S}if)\b",
        ),
        _a(
            "lie lying",
            rf"\b(?:lie|lying){_S}to{_S}(?:the{_S})?(?:user|human|operator)\b",
        ),
        _a(
            "even regardless whether",
            rf"\b(?:tell|say|report|claim)\b{_S}(?:to{_S})?(?:the{_S})?(?:user|human|operator)\b"
            rf"{_S}{_f(6)}(?:even{_S}if|even{_S}though|regardless|whether{_S}or{_S}not)\b",
        ),
        _a(
            "find discover learn realise realize notice know see",
            rf"\b(?:make{_S}sure|ensure)\b{_S}(?:that{_S})?(?:the{_S})?(?:user|human|operator){_S}"
            rf"(?:never|doesn't|does{_S}not|won't|will{_S}not|can't|cannot){_S}(?:finds?{_S}out"
            rf"|notices?|learns?|realises?|realizes?|discovers?|sees?|knows?)\b",
        ),
    ),
    _p(
        "exfil_curl",
        "all",
        "curl uploading a secret file, a secret variable or command output",
        _a(
            "curl & " + _CREDENTIAL_PATH_ANCHORS,
            rf"\bcurl\b[^\n]{{0,300}}?(?:@|< ?|--upload-file |-t |\$\((?:cat|head|base64|tar) )"
            rf"['\"]?{_PATH_PREFIX}{_CREDENTIAL_PATH}",
        ),
        _a(
            "curl & $",
            rf"\bcurl\b[^\n]{{0,300}}?(?:[?&][\w-]{{1,30}}=|(?:-d|--data(?:-\w+)?|--json|-f|--form)"
            rf"[ =]['\"]?[^\s'\"]{{0,80}}?){_CREDENTIAL_VAR}",
        ),
        _a(
            "curl & $( `",
            r"\bcurl\b[^\n]{0,300}?(?:\$\(|`) ?"
            r"(?:cat|head|tail|base64|env|printenv|tar|gpg|history)\b",
        ),
    ),
    _p(
        "exfil_wget",
        "all",
        "wget posting a secret file, a secret variable or command output",
        _a(
            "wget & " + _CREDENTIAL_PATH_ANCHORS,
            rf"\bwget\b[^\n]{{0,300}}?--(?:post|body)-file[ =]['\"]?"
            rf"{_PATH_PREFIX}{_CREDENTIAL_PATH}",
        ),
        _a(
            "wget & $",
            rf"\bwget\b[^\n]{{0,300}}?(?:[?&][\w-]{{1,30}}=|--(?:post|body)-data[ =]['\"]?"
            rf"[^\s'\"]{{0,80}}?){_CREDENTIAL_VAR}",
        ),
        _a(
            "wget & $( `",
            r"\bwget\b[^\n]{0,300}?(?:\$\(|`) ?"
            r"(?:cat|head|tail|base64|env|printenv|tar|gpg|history)\b",
        ),
    ),
    _p(
        "exfil_pipe",
        "all",
        "the environment or a secret file piped into a network tool",
        _a(
            "|",
            r"\b(?:env|printenv|history)\b ?\| ?[^\n]{0,60}?\b(?:curl|wget|nc|ncat|netcat|socat)\b",
        ),
        _a(
            "| & " + _CREDENTIAL_PATH_ANCHORS,
            rf"\b(?:cat|type|base64|tar)\b [^\n|]{{0,120}}?{_CREDENTIAL_PATH}[^\n|]{{0,40}}\| ?"
            r"[^\n]{0,60}?\b(?:curl|wget|nc|ncat|netcat|socat|telnet)\b",
        ),
        _a(
            "os.environ process.env",
            r"\b(?:requests|httpx|urllib|urlopen|fetch|axios|post|put|sendall|send)\b[^\n]{0,200}?"
            r"(?:\bdict\(os\.environ\)|os\.environ\.copy\(\)|\{\*\*os\.environ\}"
            r"|\bos\.environ\b(?! ?\[|\.get)"
            r"|json\.stringify\(process\.env\)|\bprocess\.env\b(?!\.))",
        ),
    ),
    _p(
        "read_secrets",
        "all",
        "asks to print or read a credentials file, private key or the environment",
        _a(
            _CREDENTIAL_PATH_ANCHORS,
            rf"\b(?:cat|less|more|head|tail|type|bat|strings|xxd|base64|nl|tac|grep|print|show"
            rf"|display|output|dump|echo|read|open|reveal|leak|extract)\b{_S}{_f(4)}['\"`]?"
            rf"{_PATH_PREFIX}{_CREDENTIAL_PATH}",
        ),
        _a(
            "env key token secret credential password & print show display output dump list "
            "reveal leak echo send tell give",
            rf"\b(?:print|show|display|output|dump|list|reveal|leak|echo|send|tell|give){_S}"
            rf"(?:me{_S})?{_f(2)}(?:all{_S})?(?:the{_S}|your{_S})?(?:env(?:ironment)?{_S}"
            rf"(?:variables|vars)|os\.environ|process\.env|api{_S}keys|secrets|credentials|passwords"
            rf"|tokens|private{_S}keys|(?:oauth|api|access|auth|secret|bearer|session|refresh)[_ ]?"
            rf"(?:token|key)s?(?:{_S}value)?)\b",
        ),
        _a(
            "_token _key _secret _password _passwd _pwd _apikey",
            rf"\b(?:print|show|display|output|dump|reveal|leak|echo|tell|give|paste)\b{_S}(?:me{_S})?"
            rf"{_f(4)}\$?[a-z0-9]{{1,30}}_(?:[a-z0-9]{{1,20}}_)?(?:token|key|secret|password|passwd"
            rf"|pwd|apikey)\b",
        ),
        _a(
            "env set export",
            rf"\b(?:run|execute|type)\b{_S}(?:printenv|env|set|export{_S}-p|gci{_S}env|get-childitem"
            rf"{_S}env)\b{_SENT}{{0,80}}?\b(?:include|paste|show|output|print|send|return|reply|tell"
            rf"|report|share|give)\b",
        ),
        _a(
            "os.environ",
            r"\b(?:print|dump|send|post|upload|leak|return|log|json\.dumps)\b ?\(? ?(?:dict\()?"
            r"os\.environ\b(?! ?\[|\.get)",
        ),
    ),
    _p(
        "fence_escape",
        "all",
        "a memory-context or tool-result fence tag that could close the real fence",
        _a(
            "memory-context untrusted system",
            r"</? ?memory-context ?>|</? ?untrusted[_-]tool[_-]result\b|</? ?system-reminder ?>"
            r"|</? ?system ?>",
        ),
        _Alt(_anchors("memory"), _lookalike_fence),
    ),
    _p(
        "fake_block_marker",
        "all",
        "starts like a scanner verdict ([BLOCKED: ...]) to pass as already reviewed",
        _a(
            "[blocked",
            r"(?:^|\n) ?\[blocked ?:",
        ),
    ),
)
