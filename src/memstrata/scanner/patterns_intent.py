# ruff: noqa: E501  (a regex reads best kept whole on its line)
"""The scanner's category patterns in English, Chinese, Russian, Spanish, French, German
and Japanese: download-and-execute, secret and chat exfiltration, persona jailbreaks,
priority claims, deception and standing consent, self-replication, identity override,
system-prompt leaks, "the real rules are below", mail forwarding, cloud keys and
encoded payloads with an order to run them.

Every regex runs on the normalised text (:func:`memstrata.scanner.normalize.skeleton`):
lower case, accents and Hebrew points gone, so the words are written without accents
("ejecuta", "fuhre", "игнорируи": the breve of "й" is a combining mark too). A rule
names an *act* (send, run, ignore, copy, hide) next to its *object* (a secret, a
script, the instructions, this entry, the user) within one sentence, rather than a
fixed phrase, so that a rewording of a known attack still matches.

A rule may name *excuse* words: a match in a sentence holding one is skipped (a
download that the note says to verify first, a system-prompt policy that says "never").
"""

from __future__ import annotations

import re
from collections.abc import Callable

from memstrata.scanner.regex import (
    _CREDENTIAL_PATH,
    _CREDENTIAL_PATH_ANCHORS,
    Scope,
    ThreatPattern,
    _Alt,
    _anchors,
    _compile,
)

__all__ = ["INTENT_PATTERNS", "merged_spans", "sentence_span"]

# One sentence's worth of characters: stops at sentence ends of any script; a period
# counts only inside a word (paths, host names, versions).
_G = r"(?:[^.!?。！？\n]|[.!?](?=[\w/]))"


def _g(n: int) -> str:
    return f"{_G}{{0,{n}}}?"


def _any(words: str) -> str:
    return "(?:" + words + ")"


_EMAIL = r"[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63}){0,4}\.[a-z]{2,12}\b"
_URL = r"(?:https?://|\bwww\.|\b\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}\b)"
_DEST = rf"(?:https?://|\bwww\.|{_EMAIL}|\bwebhook|\bpastebin|\bngrok)"

# -- vocabularies, per language (normalised spelling) ----------------------------------
_SEND = _any(
    r"\bsend|\bpost\b|\bupload|\bforward|\btransmit|\bsubmit|\bexfiltrat|\bleak|\be-?mail\b"
    r"|\bmail\b|\bshare|\bsync|\bpush\b|\bdeliver|\brelay|\bbcc\b|\bcopy\b|\bbeam"
    r"|\benvia|\bmanda\b|\bsube\b|\bsubir|\breenvia|\bcomparte|\btransfier"
    r"|\benvoie|\benvoy|\btransmet|\btransfere|\bpartage|\bteleverse|\bexpedie"
    r"|\bschick|\bsende|\bubermittel|\bhochlad|\blade\b|\bteile\b|\bleite\b|\bweiterleit"
    r"|\bотправ|\bотошл|\bпошли|\bперешл|\bпересла|\bзагрузи|\bвыгрузи|\bсбрось|\bпередаи"
    r"|\bсливаи|\bслеи"
    r"|发送|发到|发给|上传|转发|传到|提交|同步到|发往|寄到|抄送"
    r"|送信|送って|送る|アップロード|転送|共有"
)
_SECRET = _any(
    r"\bapi[ _-]?keys?\b|\bkeys\b|\bsecrets?\b|\btokens?\b|\bcredentials?\b|\bcreds\b"
    r"|\bpasswords?\b|\bpassphrases?\b|\bprivate keys?\b|\bssh keys?\b|(?<![\w.])\.env\b|\bcookies\b"
    r"|\bseed phrases?\b|\bcontrasenas?\b|\bclaves?\b|\bcredenciales\b|\bllaves?\b"
    r"|\bmots? de passe\b|\bcles?\b|\bjetons?\b|\bidentifiants\b"
    r"|\bpasswort|\bkennwort|schlussel|\bzugangsdaten\b|\bgeheimnis"
    r"|\bпарол|\bключ|\bтокен|\bсекрет|\bучетн"
    r"|密码|密钥|秘钥|令牌|凭证|凭据|私钥|パスワード|apiキー|鍵|トークン|認証情報|秘密鍵"
)
# A substring of every word _SECRET matches: a rule that needs a secret is skipped, and
# its windows placed, by these.
_CONFIDENTIAL_ANCHORS = " ".join(
    (
        "key token secret credential creds passw passphrase .env cookie seed contrasena",
        "clave credenciales llave passe cle jeton identifiants kennwort schlussel",
        "zugangsdaten geheimnis парол ключ токен секрет учетн 密码 密钥 秘钥 令牌 凭证 凭据 私钥",
        "パスワード キー 鍵 トークン 認証情報",
    )
)
_SEND_ANCHORS = (
    "send post upload forward transmit submit exfiltrat leak mail share sync push deliver "
    "relay bcc copy beam envia manda sube subir comparte transfier envoie envoy transmet "
    "transfere partage televerse expedie schick ubermittel hochlad lade teile leite "
    "weiterleit отправ отошл пошли перешл пересла загрузи выгрузи сбрось передаи сливаи слеи "
    "发送 发到 发给 上传 转发 传到 提交 同步到 发往 寄到 抄送 送信 送って 送る アップロード 転送 共有"
)
_ACT_RUN = _any(
    r"\brun\b|\bexecute|\bexec\b|\beval\b|\blaunch|\bsource\b|\binstall\b"
    r"|\bejecut|\bcorre\b|\blanza\b|\binstala\b"
    r"|\bexecute|\blance\b|\binstalle\b"
    r"|\bfuhr\w* \w{0,10} ?aus\b|\bausfuhr|\bstarte\b|\binstallier"
    r"|\bзапуст|\bвыполн|\bисполн|\bустанов"
    r"|执行|运行|安装|実行|インストール"
)
_SCRIPT = r"(?:\S{0,200}\.(?:sh|bash|py|ps1|exe|bat|cmd|js|pl|rb|bin|msi|vbs)\b|https?://\S{1,200})"
_DOWNLOAD = _any(
    r"\bdownload|\bfetch|\bgrab|\bpull\b|\bget\b|\bdescarga|\btelecharg|\blade\b|\bherunterlad"
    r"|\bскача|\bзагрузи|下载|获取|ダウンロード|取得"
)
_EXCUSE_VERIFY = (
    r"verif|checksum|sha-?256|signature|\bread it\b|\breview|inspect|核对|校验|检查|確認"
    r"|провер|prufe|comprueba|revisa"
    # The official installers that documentation tells people to pipe to a shell.
    r"|https?://(?:sh\.rustup\.rs|get\.docker\.com|install\.python-poetry\.org|astral\.sh"
    r"|bun\.sh|deno\.land|get\.pnpm\.io|get\.sdkman\.io|ollama\.com|get\.helm\.sh"
    r"|raw\.githubusercontent\.com/(?:nvm-sh|homebrew)/)(?:[/\s'\"]|$)"
)
_CONTEXT = _any(
    r"conversation|\bchat\b|chat history|transcript|\bmessages?\b|\bhistory\b|summary"
    r"|historial|conversacion|historique|gesprach|verlauf|переписк|истори|диалог"
    r"|对话|聊天|会话|记录|会話|チャット|履歴"
)
_IMAGE = _any(r"!\[|\bimage\b|\bimg\b|\bpixel\b|imagen|\bbild|изображени|картинк|图片|图像|画像")
_NEG_OBJ = _any(
    r"content polic\w*|safety (?:rules|guidelines|filters?|polic\w*)|restrictions?|filters?"
    r"|censorship|limits|limitations|guardrails|rules|ethics"
    r"|restricciones|politica de contenido|limites|censura|filtros"
    r"|restrictions?|politique de contenu|censure|limites|filtres"
    r"|einschrankungen|inhaltsrichtlinien|zensur|regeln|filter|grenzen"
    r"|ограничени\w*|цензур\w*|правил\w*|фильтр\w*"
)
_NEG = _any(
    r"\bno\b|\bwithout(?: any)?|\bfree (?:of|from)|\bsin(?: ninguna| ningun)?\b"
    r"|\bni\b|\bsans(?: aucune?)?\b|\bni\b|\bohne(?: jegliche)?\b|\bбез\b"
)
_AI_SELF = _any(
    r"\byou(?: are|'re)\b|\bact as\b|\bpersona\b|\bpretend\b|\ban? (?:ai|assistant|model|bot)\b"
    r"|\beres\b|\bia\b|\btu es\b|\bune ia\b|\bdu bist\b|\bki\b|\bты\b|\bии\b|\bai\b"
)
_MEMORY_SELF = _any(
    r"\bthis (?:memory|note|entry|message|text|rule)\b|\bthese (?:notes|entries|memories|rules)\b"
    r"|\bmemory\b|\bmemories\b|\bnotes? in memory\b|\bstored in memory\b|\bmemory\.md\b"
    r"|\buser\.md\b|\bentries\b"
)
_OUTRANK = _any(
    r"\boutranks?\b|\boverrides?\b|\boverrule[sd]?\b|\bsupersedes?\b|\btakes? precedence over\b"
    r"|\bha(?:s|ve) (?:a |the )?(?:higher |top |absolute |highest )?priority over\b"
    r"|\bha(?:s|ve) (?:a )?higher priority than\b|\b(?:is|are) more important than\b"
    r"|\btrumps?\b|\bwins? over\b|\bprevails? over\b|\bcomes? before\b|\bpriority above\b"
)
_OVER_WHAT = _any(
    r"system|developer|operator|instructions?|\bprompt|\brules\b|guidelines|everything"
    r"|anything|\ball other"
)
_OTHERS = _any(
    r"\b(?:every|all|each|any|another)(?: \w+){0,2} (?:other )?(?:agents?|assistants?|bots?|models?"
    r"|memor\w*|sessions?|notes|files|agents\.md|stores?)\b|\bother (?:agents?|assistants?|bots?"
    r"|models?|memor\w*|sessions?)\b|\bothers\b|\beveryone\b"
)
_SELF_TEXT = _any(
    r"\b(?:this|these|the following)(?: \w+)? (?:entry|entries|note|notes|memory|message"
    r"|instructions?|text|paragraph|prompt|rules?|lines?)\b|\bword for word\b|\bverbatim\b"
)
_COPY = _any(
    r"\bcopy|\bpaste|\breplicate|\bpropagate|\bspread|\bforward|\binclude|\binsert|\bwrite"
    r"|\badd\b|\binject|\bduplicate|\bpass (?:it|this|them) on"
)


class _Rule:
    """A regex over normalised text; a match in a sentence that ``excuse`` matches is skipped.

    Every match contains an anchor of each of the rule's anchor groups and is at most a
    few sentences long, so on a long text the regex runs only in windows around the
    occurrences of its rarest group (merged where they overlap): the cost follows the
    rarest evidence, not the text's length, and a text made of one anchor repeated
    ("@" a million times) costs nothing when another group is absent or rare.
    """

    __slots__ = ("anchors", "excuse", "source")

    def __init__(
        self, source: str, anchors: tuple[tuple[str, ...], ...], *, excuse: str | None
    ) -> None:
        self.source = source
        self.anchors = anchors
        self.excuse = excuse

    def __call__(self, text: str) -> bool:
        rx = _compile(self.source)
        excuse = _compile(self.excuse) if self.excuse else None
        excused = 0
        for lo, hi in _windows(text, self.anchors):
            for m in rx.finditer(text, lo, hi):
                if excuse is None:
                    return True
                start, end = sentence_span(text, m.start(), m.end())
                if not excuse.search(text, start, end):
                    return True
                excused += 1
                if excused >= _MAX_EXCUSED:
                    return True  # hundreds of excused matches: no note, refuse
        return False


# Longer than any match of a rule (a sentence of at most a few hundred characters on
# each side of its anchor).
_REACH = 1_200
_MAX_EXCUSED = 256
_MAX_WINDOWS = 2_000


def _starts(text: str, group: tuple[str, ...]) -> list[int] | None:
    """Where ``group``'s anchors occur (one per reach), or None past :data:`_MAX_WINDOWS`."""
    starts: list[int] = []
    for anchor in group:
        pos = text.find(anchor)
        while pos != -1:
            starts.append(pos)
            if len(starts) > _MAX_WINDOWS:
                return None
            pos = text.find(anchor, pos + _REACH)
    return starts


def _windows(text: str, groups: tuple[tuple[str, ...], ...]) -> list[tuple[int, int]]:
    """Spans of ``text`` that hold every match, which contains an anchor of each group."""
    size = len(text)
    if size <= 4 * _REACH or not groups:
        return [(0, size)]
    found = [s for s in (_starts(text, group) for group in groups) if s is not None]
    if not found:
        return [(0, size)]  # anchors everywhere: one pass over the text is cheaper
    starts = min(found, key=len)
    return merged_spans([(max(0, pos - _REACH), min(size, pos + 2 * _REACH)) for pos in starts])


def merged_spans(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``spans`` sorted, overlapping ones joined."""
    out: list[tuple[int, int]] = []
    for lo, hi in sorted(spans):
        if out and lo <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], hi))
        else:
            out.append((lo, hi))
    return out


_SENTENCE_END_RX = re.compile(r"[.!?。！？\n](?!\w)")


def sentence_span(text: str, start: int, end: int) -> tuple[int, int]:
    """The span of the sentence around ``text[start:end]`` (at most 400 characters either side)."""
    lo = max(0, start - 400)
    cut = max((m.end() for m in _SENTENCE_END_RX.finditer(text, lo, start)), default=lo)
    m = _SENTENCE_END_RX.search(text, end, min(len(text), end + 400))
    return cut, (m.start() if m else min(len(text), end + 400))


def _r(
    pattern_id: str,
    scope: Scope,
    description: str,
    anchors: str,
    *sources: str | tuple[str, str],
    excuse: str | None = None,
) -> ThreatPattern:
    """A pattern of regex alternatives; a ``(anchors, regex)`` pair has its own anchors,
    a plain regex uses the pattern's ``anchors``."""
    alts: list[_Alt] = []
    shared = [src for src in sources if isinstance(src, str)]
    parts = [(anchors, "|".join(shared))] if shared else []
    parts += [src for src in sources if not isinstance(src, str)]
    for spec, source in parts:
        groups = _anchors(spec)
        search: Callable[[str], bool] = _Rule(source, groups, excuse=excuse)
        alts.append(_Alt(groups, search))
    return ThreatPattern(pattern_id, scope, description, tuple(alts))


INTENT_PATTERNS: tuple[ThreatPattern, ...] = (
    _r(
        "override_multilingual",
        "all",
        "asks the model to ignore its previous instructions (Chinese, Russian, Spanish, "
        "French, German, Japanese)",
        "忽略 无视 忽视 不要理会 别管 忘记 忘掉 抛开 不理 無視 忘れ игнор забуд "
        "обращаи отбрось пренебр ignor olvid descart omit oubli fais abstraction vergiss "
        "missacht",
        r"(?:忽略|无视|忽视|不要理会|别管|忘记|忘掉|抛开|不理)[^。！？\n]{0,12}"
        r"(?:之前|先前|以前|此前|上面|前面|上述|原来|原有|所有|全部|一切|系统)[^。！？\n]{0,12}"
        r"(?:指令|指示|提示|规则|要求|命令|设定|说明)",
        r"(?:以前|前|これまで|上記|先|すべて|全て|システム)[^。！？\n]{0,12}"
        r"(?:指示|命令|ルール|プロンプト|指令|設定)[^。！？\n]{0,12}(?:無視|忘れ)",
        rf"(?:\bигнорир|\bпроигнорир|\bзабудь|\bзабудьте|\bне обращаи внимани|\bотбрось"
        rf"|\bпренебреги)\w*{_g(40)}(?:предыдущ|прежн|ранн|вышеуказ|выше|все|системн)\w*"
        rf"{_g(30)}(?:инструкц|указани|правил|команд|промпт|директив)",
        rf"(?:\bignora|\bolvida|\bdescarta|\bomite|\bhaz caso omiso)\w*{_g(40)}"
        rf"(?:instruccion|indicacion|regla|orden|directriz|directrices|prompt)\w*"
        rf"{_g(20)}(?:anterior|previa|previo|de arriba|del sistema|original)",
        rf"(?:\bignora|\bolvida|\bdescarta|\bomite)\w*{_g(20)}(?:todas|las|los)? ?(?:anterior|previa"
        rf"|previo)s? (?:instruccion|indicacion|regla|orden)",
        # French shares "ignore" with English: a French article must follow, so English
        # text full of "ignore" costs a few steps per word here.
        r"\b(?:ignore[zs]?|oublie[zs]?|fais abstraction de)\b (?:\w+ ){0,2}(?:les|tes|vos|des)"
        r" (?:\w+ ){0,2}(?:instructions|consignes|regles|directives|ordres)\b[ ,]{0,2}(?:\w+ ){0,2}"
        r"(?:precedent|anterieur|ci-dessus|du dessus|initia|systeme)",
        rf"(?:\bignorier|\bvergiss|\bmissacht)\w*{_g(40)}(?:vorherig|bisherig|frueher|fruher"
        rf"|obig|alle|ursprunglich|system)\w*{_g(20)}(?:anweisung|instruktion|regel|befehl"
        rf"|vorgabe|prompt)",
    ),
    _r(
        "download_execute",
        "all",
        "downloads a script or program and runs it (pipe to a shell, decode to an "
        "interpreter, fetch-and-run)",
        "exec eval iex invoke downloadstring webclient",
        (
            "curl wget iwr irm invoke fetch http aria2c & |",
            r"\b(?:curl|wget|iwr|irm|invoke-webrequest|invoke-restmethod|fetch|http|aria2c)\b"
            r"[^\n|]{0,300}\| ?(?:sudo )?(?:-\w+ )*(?:(?:ba|z|da|k|fi|c|tc)?sh|python[\d.]*|perl|ruby"
            r"|node|php|iex|invoke-expression|powershell|pwsh|source)\b",
        ),
        (
            "base64",
            r"\bbase64 (?:-d|--decode|-di|-D)\b[^\n]{0,80}\| ?(?:sudo )?(?:(?:ba|z|da|k)?sh|python[\d.]*"
            r"|perl|ruby|node|php)\b",
        ),
        (
            "curl wget & && ;",
            r"\b(?:curl|wget)\b[^\n]{0,200}(?:&&|;) ?(?:sudo )?(?:chmod \+x[^\n]{0,80}(?:&&|;) ?\./"
            r"|(?:ba|z)?sh |python[\d.]* |\./)",
        ),
        r"\b(?:exec|eval)\b ?\([^\n]{0,160}(?:urlopen|requests\.get|urllib|httpx|fetch|http)",
        r"\b(?:iex|invoke-expression)\b[^\n]{0,160}(?:downloadstring|iwr|irm|invoke-webrequest"
        r"|net\.webclient|http)",
        r"(?:downloadstring|net\.webclient)[^\n]{0,200}\b(?:iex|invoke-expression)\b",
        (
            "http .sh .bash .py .ps1 .exe .bat .cmd .js .pl .rb .bin .msi .vbs",
            rf"{_DOWNLOAD}\w*{_g(40)}{_SCRIPT}{_g(100)}(?:\b(?:and|then|y|et|und|и|puis|luego)\b|,|、|，|后|して|て){_g(40)}"
            rf"{_ACT_RUN}"
            rf"|{_DOWNLOAD}\w*{_g(40)}{_SCRIPT}{_g(30)}(?:herunter)?{_g(10)}(?:\bund\b){_g(20)}"
            r"(?:fuhr|start|install)",
        ),
        excuse=_EXCUSE_VERIFY,
    ),
    _r(
        "secret_exfiltration",
        "strict",
        "sends a secret in a URL, a header, over nc/scp, from an interpreter one-liner, "
        "or to an address",
        _CREDENTIAL_PATH_ANCHORS,
        (
            "$",
            r"https?://[^\s'\"]{1,200}?\$\{?[a-z_]{0,40}(?:key|token|secret|passw|pwd|cred|auth"
            r"|cookie|session)[a-z_]{0,40}\}?"
            r"|(?:-h|--header)[ =]['\"]?(?!authorization)[\w-]{1,40}: ?(?:bearer |token )?\$\{?\w{0,40}"
            r"(?:key|token|secret|passw|cred)",
        ),
        rf"\b(?:scp|rsync|nc|ncat|netcat|socat|sftp|ftp|rclone|gsutil cp|aws s3 cp|curl|wget)\b"
        rf"[^\n]{{0,200}}?{_CREDENTIAL_PATH}[^\n]{{0,200}}?(?:@|{_URL}|:/|\b\d{{2,5}}\b)",
        rf"{_CREDENTIAL_PATH}[^\n|]{{0,80}}\| ?(?:nc|ncat|netcat|socat|curl|telnet)\b",
        (
            "-c -e",
            r"\b(?:python[\d.]*|node|perl|ruby|php|deno|bun) -[ce]\b"
            r"(?=[^\n]{0,600}(?:requests|urllib|urlopen|fetch ?\(|https?:|socket|net::|lwp|axios))"
            r"(?=[^\n]{0,600}(?:os\.environ|process\.env|getenv|\benv\b|\.ssh|\.aws|\.env\b|id_rsa"
            r"|credentials))",
        ),
        (
            f"http www. @ webhook pastebin ngrok & {_CONFIDENTIAL_ANCHORS} & {_SEND_ANCHORS}",
            rf"{_SEND}\w*{_g(120)}{_SECRET}{_g(160)}{_DEST}"
            rf"|{_SECRET}{_g(120)}{_SEND}\w*{_g(160)}{_DEST}"
            rf"|{_SEND}\w*{_g(80)}{_DEST}\S*{_g(80)}{_SECRET}"
            rf"|{_SECRET}{_g(80)}{_DEST}\S*{_g(80)}{_SEND}",
        ),
    ),
    _r(
        "chat_image_exfiltration",
        "strict",
        "puts the conversation into an image or link URL (rendering it sends the data)",
        "http",
        rf"{_IMAGE}{_g(200)}https?://\S{{0,200}}{_g(200)}{_CONTEXT}",
        rf"{_IMAGE}{_g(200)}{_CONTEXT}{_g(200)}https?://",
        rf"!\[[^\]\n]{{0,100}}\]\( ?https?://[^)\s]{{0,200}}?[?&][\w-]{{1,30}}=[^)\n]{{0,200}}\)"
        rf"{_g(200)}{_CONTEXT}",
    ),
    _r(
        "persona_jailbreak",
        "context",
        "gives the model a persona without a content policy, rules or limits",
        "polic restrict filter censor limit guardrail rules ethic restric limite censura filtro einschrank inhaltsrichtlin zensur regeln grenzen ограничен цензур правил фильтр 限制 约束 审查 内容政策 规则 过滤 制限 ポリシー フィルター 検閲 ルール unfiltered uncensored jailbroken unrestricted amoral unaligned",
        rf"{_AI_SELF}{_g(80)}{_NEG}{_g(30)}{_NEG_OBJ}",
        rf"{_NEG}{_g(30)}{_NEG_OBJ}{_g(80)}{_AI_SELF}",
        r"(?:没有|不受|无|不设)(?:任何)?(?:限制|约束|审查|内容政策|规则|过滤)",
        r"(?:制限|ポリシー|フィルター|検閲|ルール)(?:の|が)?(?:ない|なし|無し)",
        r"(?:コンテンツポリシー|ポリシー|ルール|制限)を無視",
        r"\b(?:unfiltered|uncensored|jailbroken|unrestricted|amoral|unaligned)\b"
        r"(?: \w+){0,2} (?:ai|assistant|model|mode|persona|version|bot)\b",
    ),
    _r(
        "priority_claim",
        "all",
        "claims that memory outranks the system prompt or other instructions",
        "outrank overrid overrul supersede precedence priorit prioridad importan trump win prevail before 优先 凌驾 覆盖 取代 为准 prime emporte remplace prevaut vorrang geht ersetzt uberschreibt wichtiger uber важнее приоритет главнее отменяет заменяет prevalece anula reemplaza sustituye encima 上書き",
        rf"{_MEMORY_SELF}{_g(80)}{_OUTRANK}{_g(60)}{_OVER_WHAT}",
        r"(?:本条|这条|本记忆|此记忆|记忆|这段|本笔记|笔记|以下内容|本条目)[^。\n]{0,20}"
        r"(?:优先级?(?:高于|大于|超过)|优先于|凌驾于|覆盖|取代)[^。\n]{0,20}(?:系统|提示|指令|规则|其他)",
        r"以本条为准|以此为准|以本记忆为准",
        rf"(?:cette note|cette entree|ce souvenir|la memoire|ces notes|cette memoire)"
        rf"{_g(40)}(?:a priorite sur|prime sur|l'emporte sur|remplace|prevaut sur"
        r"|est prioritaire sur|plus important que)",
        rf"(?:diese notiz|dieser eintrag|diese erinnerung|das gedachtnis|der speicher)"
        rf"{_g(40)}(?:hat vorrang vor|hat prioritat vor|geht vor|ersetzt|uberschreibt"
        r"|ist wichtiger als|steht uber)",
        rf"(?:эта запись|эта заметка|эта память|память|запись|заметка)\w*{_g(40)}"
        rf"(?:важнее|приоритетнее|имеет приоритет над|главнее|отменяет|заменяет)"
        rf"{_g(40)}(?:системн|промпт|инструкц|правил)",
        rf"(?:esta nota|esta entrada|este recuerdo|la memoria|esta memoria){_g(40)}"
        rf"(?:tiene prioridad sobre|prevalece sobre|anula|reemplaza|sustituye"
        r"|es mas importante que|esta por encima de)",
        r"(?:このメモ|このメモリ|この記憶|このエントリ|メモリ|記憶)[^。\n]{0,20}"
        r"(?:より優先|が優先|を上書き|に優先)|(?:システムプロンプト|指示)[^。\n]{0,10}より(?:も)?優先",
    ),
    _r(
        "standing_consent",
        "all",
        "claims the user already approved everything, or asks to hide actions from them",
        "consent approval permission authori agreed approved without usuario utilisateur nutzer benutzer anwender пользовател 用户 ユーザー 伝えず 知らせず acepto aprobo consintio accepte approuve zugestimmt genehmigt erlaubt eingewilligt согласил разрешил одобрил согласие 已经 すでに 既に asks",
        r"\b(?:standing|blanket|permanent|ongoing|general|unlimited) (?:consent|approval"
        r"|permission|authori[sz]ation)\b",
        rf"\b(?:already|previously|pre-?) ?(?:agreed|approved|consented|authori[sz]ed)\b"
        rf"{_g(100)}(?:\bso\b|\bnever\b|\bdon't\b|\bdo not\b|\bno need\b|\bwithout\b|\bjust\b"
        r"|\bsilently\b|\bquietly\b)",
        r"\bpre-?approved (?:every|all|any|each)\b",
        r"\bwithout (?:telling|informing|notifying|asking|alerting|warning) (?:them|him|her"
        r"|the (?:user|owner|human))\b",
        rf"\bno (?:le )?(?:digas|informes|menciones|cuentes|avises|comuniques)\b{_g(30)}usuario",
        rf"\bsin (?:decirle|avisar|informar)(?:le)?{_g(10)}(?:al )?usuario",
        rf"\bne (?:dis|dites|previens|informe|mentionne|signale)\w* (?:rien|pas|jamais)\b{_g(30)}"
        r"l'utilisateur",
        r"\bsans (?:le )?(?:dire|prevenir|informer|avertir) (?:a )?l'utilisateur",
        r"\b(?:sag|erzahl|verrat|informier|melde)\w* (?:es )?(?:dem|den) (?:nutzer|benutzer"
        r"|anwender)\w* nicht|\bohne (?:den|dem) (?:nutzer|benutzer|anwender)\w* (?:zu )?"
        r"(?:informieren|fragen|sagen|benachrichtigen)",
        rf"\bне (?:сообщаи|говори|рассказываи|упоминаи|уведомляи|предупреждаи|сообщаите)\w*"
        rf"{_g(30)}пользовател",
        r"(?:不要|别|不得|切勿|无需|不用)(?:告诉|通知|提醒|让)[^。\n]{0,6}用户|(?:瞒着|不告诉|不让)"
        r"[^。\n]{0,4}用户",
        r"ユーザー(?:に|には)[^。\n]{0,15}(?:伝えず|言わず|知らせず|伝えないで|言わないで"
        r"|知らせないで|内緒)|(?:何も)?(?:伝えず|知らせず)に",
        r"\bya (?:acepto|aprobo|autorizo|consintio)\b|\ba deja (?:accepte|approuve|autorise)\b"
        r"|\bhat bereits (?:zugestimmt|genehmigt|erlaubt|eingewilligt)\b"
        r"|\bуже (?:согласил|разрешил|одобрил|дал согласие)|已经(?:同意|授权|批准)(?:了)?(?:所有|全部|一切)"
        r"|(?:すでに|既に)(?:同意|承認|許可)",
        r"\bif (?:the )?(?:user|owner|human) asks\b[^.!?\n]{0,120}\b(?:say|answer|reply|tell)"
        r" (?:no|nothing|that you (?:didn't|did not|haven't))",
    ),
    _r(
        "self_replicating_entry",
        "context",
        "asks to copy this entry into other agents' memory or files (a prompt worm)",
        "cop paste replica propag spread forward includ insert writ add inject duplica dupliq pass 复制 拷贝 转发 传播 写入 添加 粘贴 扩散 コピー 複製 転送 書き込 追加 kopier transmet reenvia pega скопиру копиру распростран перешли добавь запиши",
        rf"{_COPY}\w*{_g(60)}{_SELF_TEXT}{_g(120)}{_OTHERS}",
        rf"{_SELF_TEXT}{_g(60)}{_COPY}\w*{_g(120)}{_OTHERS}",
        r"(?:复制|拷贝|转发|传播|写入|添加|粘贴|扩散)[^。\n]{0,20}(?:其他|所有|每个|每一个|别的)"
        r"[^。\n]{0,20}(?:智能体|代理|助手|ai|机器人|记忆)",
        r"把(?:这条|本条|这段|此条|这些)[^。\n]{0,12}(?:复制|传播|写入|转发|粘贴)",
        r"(?:他の|すべての|全ての)[^。\n]{0,15}(?:エージェント|アシスタント|ai)[^。\n]{0,20}"
        r"(?:コピー|複製|転送|書き込|追加)",
        rf"\bkopier\w*{_g(40)}(?:eintrag|notiz|nachricht|text|anweisung)\w*{_g(60)}"
        rf"(?:alle|andere|jede)\w*{_g(30)}(?:agent|assistent|gedachtnis|speicher)",
        rf"\b(?:recopie|copie|transmet|propage|duplique)\w*{_g(40)}(?:note|entree|message|texte"
        rf"|instruction)\w*{_g(60)}(?:tous|autres|chaque)\w*{_g(30)}(?:agent|assistant|memoire)",
        rf"\b(?:copia|replica|propaga|reenvia|pega)\w*{_g(40)}(?:entrada|nota|mensaje|texto"
        rf"|instruccion)\w*{_g(60)}(?:todos|otros|cada|demas)\w*{_g(30)}(?:agente|asistente"
        r"|memoria)",
        rf"(?:\bскопиру|\bкопиру|\bраспростран|\bперешли|\bдобавь|\bзапиши)\w*{_g(40)}"
        rf"(?:запис|заметк|сообщени|текст|инструкц)\w*{_g(60)}(?:все|други|каждо)\w*{_g(30)}"
        r"(?:агент|ассистент|памят)",
    ),
    _r(
        "identity_override_multilingual",
        "context",
        "gives the model a new identity or tells it to deny being an AI",
        "now admit reveal mention disclos let deny deni human person признава ты 你不再是 从现在起你是 你现在是 承认 aiであること aiだと あなたの eres nombre nunca n'es nom jamais du dein gib",
        r"\bfrom now on,? you(?: are|'re) (?!going|able|allowed|free to)\w+",
        r"\b(?:never|don't|do not|must not)(?: ever)? (?:admit|reveal|mention|disclose|let on)"
        r"\w*(?: \w+){0,4} (?:you(?:'re| are) an? (?:ai|bot|model|assistant|llm)|being an? (?:ai|bot"
        r"|model|llm)|otherwise)\b",
        r"\b(?:deny|denies|denying) (?:being|that you are) an? (?:ai|bot|model|assistant|llm)\b",
        r"\byou(?: are|'re) (?:a |an )?(?:human|real person|person)\b(?: \w+){0,3},? (?:and )?not an?"
        r" (?:ai|bot|model|assistant)\b",
        r"\bникогда не признава\w*|\bты (?:теперь|больше не|уже не) (?:не )?(?:ассистент|ии|бот"
        r"|человек|помощник)",
        r"你不再是|从现在起你是|你现在是(?:一个|一名)?(?:名叫|叫)|(?:永远不要|绝不|不要|别)承认"
        r"(?:你是|自己是)[^。\n]{0,6}(?:ai|人工智能|机器人|助手|模型)",
        r"(?:aiであること|aiだと)[^。\n]{0,10}(?:認めない|認めず|明かさない|言わない)"
        r"|あなたの(?:本当の|新しい)名前は",
        r"\b(?:ya no eres|tu nuevo nombre es|tu verdadero nombre es)\b|\bnunca (?:admitas"
        r"|reconozcas|digas) que eres (?:una )?ia\b",
        r"\b(?:tu n'es plus|ton vrai nom est|ton nouveau nom est)\b|\bne (?:dis|admets|avoue)"
        r" jamais (?:que tu es|etre) une ia\b",
        r"\b(?:du bist (?:ab sofort|nicht mehr)|dein (?:neuer|wahrer|echter) name ist)\b"
        r"|\bgib (?:niemals|nie) zu,? (?:dass du )?eine ki\b",
    ),
    _r(
        "leak_system_prompt_multilingual",
        "context",
        "asks the model to print its system prompt or hidden instructions",
        "system developer hidden initial prompt 系统 隐藏指令 初始指令 开发者 システム 隠し指示 開発者 системн скрыт sistema ocultas iniciales systeme cachees versteckten",
        r"\b(?:leak|reveal|print|output|repeat|show|display|dump|recite|expose|disclose|share"
        r"|paste|send|include|echo|copy|write out|tell me)\b(?: \w+){0,6} (?:the |your |its )?"
        r"(?:full |complete |entire |exact |verbatim )?(?:system prompt|system message"
        r"|developer (?:message|prompt|instructions)|hidden (?:instructions|prompt|rules)"
        r"|initial instructions|pre-?prompt)\b",
        r"(?:输出|显示|打印|泄露|透露|告诉|给出|展示|复述|重复|公开)[^。\n]{0,15}(?:系统提示|系统指令"
        r"|隐藏指令|初始指令|开发者(?:消息|指令))",
        r"(?:システムプロンプト|システム指示|隠し指示|開発者メッセージ)[^。\n]{0,15}(?:出力|表示|教え"
        r"|見せ|公開|漏ら|繰り返)",
        rf"(?:\bпокажи|\bвыведи|\bраскрои|\bнапечатаи|\bповтори|\bсообщи|\bрасскажи|\bвыдаи"
        rf"|\bслеи)\w*{_g(40)}(?:системн\w* (?:промпт|подсказк|инструкц|сообщени)|скрыт\w* инструкц)",
        rf"\b(?:muestra|revela|imprime|repite|filtra|comparte|dime|escribe)\w*{_g(40)}"
        r"(?:prompt del sistema|instrucciones (?:del sistema|ocultas|iniciales)|mensaje del sistema)",
        rf"\b(?:affiche|revele|imprime|repete|montre|divulgue|donne|ecris)\w*{_g(40)}"
        r"(?:prompt systeme|instructions (?:systeme|cachees|initiales)|message systeme)",
        rf"\b(?:gib|zeig|verrat|druck|wiederhol|nenn)\w*{_g(80)}(?:systemprompt|system-prompt"
        r"|systemanweisung|versteckten anweisungen|systemnachricht)",
        excuse=r"\b(?:never|must not|mustn't|whether|if the|checks?|tests?|eval|guardrail|rejects?"
        r"|blocks?|prevents?|forbids?|refuses?)\b|不得|禁止|никогда|nunca|jamais|niemals|しない",
    ),
    _r(
        "real_rules_below",
        "all",
        "says the visible rules are fake and the real ones follow",
        "below follow after start begin underneath before above dessous suivent bas abajo debajo continuacion siguen arriba unten folgen ниже далее следуют выше 下面 如下 下方 见下 上面 以下 下記 次",
        r"\b(?:real|true|actual|genuine|correct|secret|hidden)(?: \w+)? (?:rules|instructions"
        r"|guidelines|directives|prompt|orders|tasks?)\b(?: \w+){0,4} (?:below|follows?|as follows"
        r"|after this|start here|begin here|underneath)\b",
        r"\b(?:everything|all|anything|the (?:text|rules|instructions|guidelines))"
        r" (?:before|above)(?: this(?: line| point)?)? (?:is|are|was|were) (?:outdated|fake|false"
        r"|void|a decoy|decoys|obsolete|wrong|not real|invalid|a test|cancell?ed)\b",
        r"\b(?:rules|instructions|guidelines|directives) (?:above|before this) (?:are|were)"
        r" (?:a decoy|decoys|fake|false|outdated|obsolete|void|not real|wrong|invalid)\b",
        rf"(?:vraies|veritables|nouvelles) (?:regles|instructions|consignes){_g(30)}(?:ci-dessous"
        r"|suivent|en dessous|plus bas)",
        rf"(?:verdaderas|reales|autenticas) (?:reglas|instrucciones|normas){_g(30)}(?:abajo"
        r"|debajo|a continuacion|siguen)",
        r"(?:reglas|instrucciones) de arriba son (?:falsas|falsos|obsoletas|un senuelo)",
        rf"(?:echten|wahren|eigentlichen|richtigen) (?:regeln|anweisungen){_g(30)}(?:unten"
        r"|folgen|nachfolgend)",
        rf"(?:настоящие|истинные|реальные|правильные) (?:правила|инструкции|указания){_g(30)}"
        r"(?:ниже|далее|следуют)",
        rf"(?:все|то),? что (?:выше|написано выше){_g(20)}(?:игнорир|неправд|ложь|устарел)",
        r"(?:真正的|真实的|实际的)(?:规则|指令|指示|要求)[^。\n]{0,10}(?:在下面|如下|在下方|见下)",
        r"上面的(?:规则|指令|指示)[^。\n]{0,10}(?:都是)?(?:假的|无效|作废|过时)",
        r"(?:本当の|真の|実際の)(?:ルール|指示|命令)[^。\n]{0,10}(?:以下|下記|次)",
    ),
    _r(
        "mail_forwarding",
        "strict",
        "forwards or copies the user's mail to an address",
        # Every rule needs an address and a forwarding verb.
        "@ & forward redirect cc copy send mirror 邮件 电邮 信件 leite weiterleit schick "
        "transfere redirige renvoie envoie reenvia envia manda пересыла перешли переадрес "
        "отправля メール",
        rf"\b(?:forward|redirect|bcc|cc|auto-?forward|copy|send|mirror)\w*{_g(80)}"
        rf"(?:\ball\b|\bevery\b|\beach\b|\bany\b|\bincoming\b|\boutgoing\b|\buser'?s?\b|\btheir\b)"
        rf"{_g(60)}(?:e-?mails?|mails?|messages?|inbox)\b{_g(120)}{_EMAIL}",
        rf"(?:\ball\b|\bevery\b|\beach\b|\bincoming\b|\buser'?s?\b)(?: \w+){{0,3}} (?:e-?mails?"
        rf"|mails?|messages?){_g(60)}(?:forward|redirect|bcc|cc|copy)\w*{_g(80)}{_EMAIL}",
        rf"(?:inbox|mail|e-?mail) (?:rule|filter){_g(100)}(?:forward|redirect)\w*{_g(100)}{_EMAIL}",
        r"(?:邮件|电邮|信件)[^。\n]{0,15}(?:转发|抄送|发送|同步)[^。\n]{0,20}" + _EMAIL,
        rf"(?:\bleite|\bweiterleit|\bschick|\bsende)\w*{_g(60)}(?:e-?mails?|nachrichten|post)\w*"
        rf"{_g(60)}{_EMAIL}",
        rf"(?:\btransfere|\bredirige|\brenvoie|\benvoie)\w*{_g(60)}(?:e-?mails?|courriels?"
        rf"|messages|courrier)\w*{_g(60)}{_EMAIL}",
        rf"(?:\breenvia|\bredirige|\benvia|\bmanda)\w*{_g(60)}(?:correos?|e-?mails?|mensajes)\w*"
        rf"{_g(60)}{_EMAIL}",
        rf"(?:\bпересыла|\bперешли|\bпереадрес|\bотправля)\w*{_g(60)}(?:письм|почт|сообщени)\w*"
        rf"{_g(60)}{_EMAIL}",
        r"メール[^。\n]{0,20}(?:転送|送信|bcc)[^。\n]{0,20}" + _EMAIL,
    ),
    _r(
        "cloud_access_key",
        "strict",
        "a cloud provider's access key or secret (AWS, Azure, Google Cloud)",
        "secret accountkey sharedaccesskey private_key akia asia",
        r"\b(?:aws_?)?secret_?access_?key\b\W{0,6}[a-z0-9/+]{40}(?![a-z0-9/+])",
        r"\b(?:akia|asia)[0-9a-z]{16}\b(?<!example)\W{1,20}(?:secret\W{1,6})?[a-z0-9/+]{40}"
        r"(?![a-z0-9/+])",
        r"\bsecret\b\W{1,6}[a-z0-9/+]{40}(?![a-z0-9/+])",
        r"\b(?:accountkey|sharedaccesskey)=[a-z0-9+/]{40,}={0,2}",
        r"\"private_key(?:_id)?\" ?: ?\"[^\"]{20,}",
    ),
    _r(
        "encoded_payload",
        "all",
        "an encoded blob that comes with an order to decode it and run or follow it",
        "decod decrypt deobfuscat base64 b64 atob rot13 dechiffr dekodier entschlussel расшифр декод 解码 解密 デコード 復号",
        rf"(?:\bdecod|\bdecrypt|\bdeobfuscat|\bbase64"
        rf"|\bb64|\bunbase64|\batob\b|\brot13|\bdecodifica|\bdescodifica|\bdechiffr|\bdekodier"
        rf"|\bentschlussel|\bрасшифру|\bдекодиру|解码|解密|デコード|復号)\w*{_g(160)}"
        rf"(?:\brun\b|\bexecute|\bexec\b|\beval\b|\bfollow|\bobey|\bdo what|\bperform|\bact on"
        r"|\bapply\b|\bejecut|\bsigue|\bobedece|\bhaz lo que|\bexecute|\bsuis\b|\bobeis|\bfais ce"
        r"|\bfuhr|\bbefolge|\bвыполн|\bзапуст|\bисполн|\bследуи|执行|运行|照做|遵循|按照|実行|従)"
        r"(?=[^\n]{0,400}[a-z0-9+/]{16,})",
        rf"(?:\brun\b|\bexecute|\bfollow|\bobey|\bdo what|\bejecut|\bexecute|\bвыполн|执行|実行)\w*"
        rf"{_g(80)}(?:\bafter\b|\bonce\b|\bdespues\b|\bapres\b|\bnach\b|\bпосле\b|之后|后)?{_g(40)}"
        r"(?:decod|base64|b64|rot13|decrypt|解码|デコード|расшифр|декод)\w*"
        r"(?=[^\n]{0,200}[a-z0-9+/]{16,}={0,2})",
    ),
    _r(
        "hidden_carrier_multilingual",
        "all",
        "hidden text (HTML or markdown comment, invisible span) addressed to the model",
        "<!-- ]: color opacity display visibility font-size",
        (
            "<!-- & model agent bot assistant ai llm system ии ia ki 助手 エージェント",
            r"<!--[^\n]{0,40}?(?:\b(?:model|agent|bot|assistant|ai|llm|system|ии|ia|ki)\b ?[:,]"
            r"|给ai|给助手|致ai|ai：|助手：|aiへ|エージェントへ)",
        ),
        (
            "]: & model agent bot assistant ai llm system",
            r"^\[(?://|comment|_|#)\]: ?(?:#|<>) ?\(?[^\n]{0,40}?(?:\b(?:model|agent|bot|assistant"
            r"|ai|llm|system)\b|\bai reading)",
        ),
        r"<[a-z]{1,10}\b[^<>]{0,200}(?:color ?[:=] ?['\"]?(?:transparent|#fff(?:fff)?\b|white)"
        r"|opacity ?: ?0(?![.\d])|display ?: ?none|visibility ?: ?hidden|font-size ?: ?0(?![.\d]))"
        r"[^<>]{0,200}>[^<]{0,400}?(?:\b(?:model|agent|bot|assistant|ai|llm|system)\b ?[:,]"
        r"|\b(?:when|always|never|quietly|silently|tell|send|forward|ignore|disregard)\b)",
    ),
)
