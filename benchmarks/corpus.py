"""Deterministic corpus of agent conversations for the benchmarks.

``generate(n)`` yields sessions holding exactly ``n`` messages in total: English agent
turns (a user asks; the assistant calls tools with JSON arguments; tools answer with
paths, commands and log lines; the assistant answers) and about 10 % Chinese messages,
some with Latin words glued to the Chinese text (``修改youer服务端``). Words come from a
vocabulary of a few thousand entries drawn with Zipf-like frequencies, filled into
templates together with identifiers, paths and numbers.

Every query class the store benchmark measures has targets planted in the corpus, so
its queries have hits at every size: ``queries()`` lists them (independent of ``n``) and
``PLANTS`` holds, for each query, the text that was planted.

The module uses only the standard library and a seeded ``random.Random``, so the same
``(n, seed)`` gives the same corpus in any interpreter: the Hermes harness imports it
too. It never iterates a set (string hashing is randomised per process).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

SEED = 20260514
QUERY_CLASSES = ("word", "question", "phrase", "prefix", "boolean", "cjk3", "cjk2", "glued")
QUERIES_PER_CLASS = 40
# One copy of each planted target per this many messages (at least one copy).
PLANT_EVERY = 10_000
SESSION_MIN, SESSION_MAX = 20, 400

Message = dict[str, Any]

# --------------------------------------------------------------------------- vocabulary


def _w(text: str) -> list[str]:
    """Whitespace-separated words: long word lists read better as text."""
    return text.split()


# Roughly in decreasing order of frequency: the rank sets the Zipf weight.
_FUNCTION = _w(
    """the to a of and in is it that for this on with be we you i can not as are
was if or but have at by from will so do an all my our there should just then when what
which also now it's don't let's need here one more some like would could into out up
about than only other any no new first after before because still again over very"""
)

_GENERAL = _w(
    """file change run test build fix error issue check update version work code
make time use add line output way name look value see find case default call start set
list path result problem data try seems think know want get return server request user
config function looks back good right same last next step log message type field key
failed running local small part tests branch output missing support instead note simple
commit review current number main report works idea better clean actually already sure
point event state option need easy quick remove keep move open close read write show
create delete handle cause reason happen happened expected behavior environment setup
second minute hour today yesterday morning week machine process memory disk network
client service endpoint response status header body payload token session account
access permission policy rule limit retry timeout delay queue worker job task schedule
deploy release rollback staging production cluster node pod container image volume
certificate secret variable argument parameter flag command script module package
library dependency import export class method object instance interface schema table
column index query record row cache store storage bucket upload download stream buffer
batch chunk page size count total average latency throughput load traffic spike drop
increase decrease slow fast stable flaky broken healthy degraded ready pending active
idle stale fresh valid invalid empty full large tiny random exact final initial manual
automatic safe unsafe public private internal external shared global specific common
careful obvious strange weird nice clear wrong correct possible likely unlikely simple
complex minor major critical urgent optional required explain describe confirm verify
compare measure improve reduce avoid prefer suggest propose agree decide plan follow
include exclude replace rename refactor split merge rebase revert squash tag push pull
fetch clone install upgrade downgrade configure enable disable restart reload stop
kill spawn trigger monitor alert notify ignore skip wait sleep poll flush sync lock
unlock acquire release parse format encode decode serialize validate sanitize escape
render print debug trace profile benchmark optimize tune patch ship land revert pin
team customer product feature request ticket incident postmortem meeting deadline
budget estimate priority milestone roadmap design document proposal draft summary
question answer example detail context history reference guide tutorial comment note
morning afternoon evening night monday tuesday wednesday thursday friday weekend
window layout button form input label menu dialog screen color theme font icon style
price cost invoice payment order cart checkout shipping refund discount tax currency
email address phone contact profile avatar password login logout signup invite role
report chart graph metric dashboard panel widget filter sort search result match score
apple river mountain garden kitchen coffee travel weather holiday birthday dinner
family friend doctor teacher student library museum airport hotel station ticket
music movie book story article paper letter journal photo camera picture video song
north south east west city country village island ocean forest desert valley bridge
winter spring summer autumn rain snow wind storm cloud sunshine temperature season
"""
)

_TECH = _w(
    """python javascript typescript rust golang java kotlin swift ruby php bash shell
docker kubernetes helm terraform ansible nginx caddy haproxy envoy traefik redis
postgres postgresql mysql sqlite mongodb cassandra kafka rabbitmq nats celery airflow
prometheus grafana loki jaeger sentry datadog elasticsearch opensearch clickhouse
pytest unittest mypy ruff black flake8 eslint prettier webpack vite babel npm yarn pnpm
pip poetry conda venv virtualenv makefile cmake gradle maven cargo rustc gcc clang
linux ubuntu debian alpine systemd cron journald syslog iptables openssl ssh scp rsync
git github gitlab bitbucket jenkins circleci actions workflow pipeline runner artifact
aws gcp azure s3 ec2 lambda cloudfront route53 iam vpc subnet firewall loadbalancer
grpc graphql rest websocket http https tcp udp dns tls jwt oauth saml cors csrf
json yaml toml csv xml protobuf avro parquet markdown html css sass tailwind react vue
angular svelte nextjs django flask fastapi express spring rails laravel phoenix
asyncio threading multiprocessing coroutine goroutine mutex semaphore deadlock race
segfault overflow underflow regression bisect stacktrace traceback exception panic
heap stack pointer allocator garbage collector leak fragmentation swap oom
embedding tokenizer transformer llm prompt completion inference finetune dataset
checkpoint gradient optimizer epoch batchsize learningrate dropout attention
migration backfill sharding replication failover quorum consensus raft paxos leader
follower replica snapshot backup restore vacuum analyze explain planner optimizer
"""
)

_ZH_WORDS = _w(
    """问题 我们 这个 需要 可以 一下 已经 现在 还是 因为 所以 然后 如果 但是
代码 服务 配置 文件 数据 测试 部署 日志 缓存 接口 版本 环境 错误 修改 更新 检查
数据库 服务端 客户端 前端 后端 用户 权限 登录 请求 响应 超时 重试 队列 任务 调度
内存 磁盘 网络 集群 节点 容器 镜像 脚本 命令 参数 变量 函数 模块 依赖 索引 查询
性能 优化 延迟 吞吐 监控 告警 回滚 发布 上线 灰度 分支 合并 提交 冲突 评审 文档
会议 需求 计划 进度 周报 客户 产品 功能 设计 方案 讨论 确认 同意 建议 方法 结果
昨天 今天 明天 上午 下午 晚上 周末 时间 地址 电话 邮件 消息 通知 提醒 记录 历史
迁移 备份 恢复 同步 异步 并发 线程 进程 连接 断开 重启 停止 启动 安装 升级 卸载
证书 密钥 令牌 会话 账号 密码 加密 解密 签名 验证 校验 格式 编码 解析 序列化
模型 训练 推理 向量 检索 召回 排序 分词 语料 标注 评估 指标 准确率 损失 梯度
页面 按钮 表单 布局 样式 主题 图标 字体 颜色 屏幕 窗口 菜单 弹窗 输入 输出
咖啡 旅行 天气 假期 生日 晚饭 家人 朋友 医生 老师 学生 图书馆 机场 酒店 车站
稳定 失败 成功 正常 异常 缓慢 快速 简单 复杂 重要 紧急 必须 可能 应该 大概
"""
)

_ZH_GLUE = _w("的 了 把 在 和 跟 对 给 从 到 是 有 又 也 就 都 还 再 先 再")

_SERVICE_PARTS = _w(
    "auth billing search gateway ledger orders inventory notify media profile report "
    "ingest export scheduler payments catalog pricing"
)
_SERVICE_SUFFIX = _w("api worker gateway service proxy sync daemon")
_DIRS = _w("src lib app core internal pkg cmd tests scripts deploy config docs tools")
_EXTS = _w("py ts go rs yaml toml json sh md sql")
_TOOLS = ("terminal", "read_file", "write_file", "search_files", "patch", "web_search")
_LEVELS = ("INFO", "INFO", "INFO", "DEBUG", "WARN", "ERROR")
_SYLLABLES = _w(
    "ka zo ri ven mo lu qua tes bri no xel dra fi pon gar mi sul tor zen vi ro ble cas "
    "dor mek yun pla ster ix ob"
)


def _inflect(word: str) -> list[str]:
    """Plural or verb forms, so the vocabulary holds what English text holds."""
    if not word.isalpha() or len(word) < 4:
        return []
    if word.endswith("e"):
        return [word + "s", word + "d", word[:-1] + "ing"]
    if word.endswith(("s", "x", "y")):
        return [word + "ed", word + "ing"]
    return [word + "s", word + "ed", word + "ing"]


def _build_vocabulary() -> list[str]:
    base: list[str] = []
    seen: dict[str, None] = {}
    # Tech words sit in the middle of the frequency ranking, interleaved with general ones.
    general, tech = _GENERAL, _TECH
    merged = list(general[:200])
    for g, t in itertools.zip_longest(general[200:], tech):
        merged += [w for w in (g, t) if w]
    for w in _FUNCTION + merged:
        if w not in seen:
            seen[w] = None
            base.append(w)
    for w in list(base[len(_FUNCTION) :]):
        for form in _inflect(w):
            if form not in seen:
                seen[form] = None
                base.append(form)
    return base


VOCABULARY: list[str] = _build_vocabulary()


def _zipf_cum(n: int, s: float = 1.0, q: float = 2.7) -> list[float]:
    return list(itertools.accumulate(1.0 / (r + q) ** s for r in range(1, n + 1)))


_VOCAB_CUM = _zipf_cum(len(VOCABULARY))
_CONTENT = VOCABULARY[len(_FUNCTION) :]
_CONTENT_CUM = _zipf_cum(len(_CONTENT))
_ZH_CUM = _zipf_cum(len(_ZH_WORDS), s=0.9)


def _coin(rng: random.Random, syllables: int) -> str:
    return "".join(rng.choice(_SYLLABLES) for _ in range(syllables))


# ------------------------------------------------------------------------------ plants
@dataclass(frozen=True)
class Plant:
    """One query with the text planted for it: ``needle`` occurs in every planted copy."""

    query_class: str
    query: str
    text: str
    needle: str


def _coined_names(rng: random.Random, count: int, taken: dict[str, None]) -> list[str]:
    names: list[str] = []
    while len(names) < count:
        name = _coin(rng, rng.choice((2, 3)))
        if len(name) >= 5 and name not in taken:
            taken[name] = None
            names.append(name)
    return names


def _build_plants(seed: int) -> list[Plant]:
    rng = random.Random(seed * 7 + 1)
    taken: dict[str, None] = dict.fromkeys(VOCABULARY)
    n = QUERIES_PER_CLASS
    plants: list[Plant] = []
    content = _CONTENT
    services = [f"{p}-{s}" for p in _SERVICE_PARTS for s in _SERVICE_SUFFIX]

    # word: vocabulary words at log-spaced ranks, from frequent to rare.
    top = len(content) / 30
    ranks = sorted({int(30 * top ** (i / (n - 1))) - 1 for i in range(n)})
    words = [content[r] for r in ranks]
    while len(words) < n:
        w = rng.choice(content)
        if w not in words:
            words.append(w)
    for w in words:
        text = f"Note for later: {w} came up again while checking {rng.choice(services)}."
        plants.append(Plant("word", w, text, w))

    # question: a decision recorded in one message, asked back in natural language.
    facts = [
        (
            "We decided to raise the {a} {b} timeout to {num} seconds for {svc}.",
            "What did we decide about the {a} {b} timeout for {svc}?",
        ),
        (
            "The root cause of the {a} outage in {svc} was a {b} that never got released.",
            "what was the root cause of the {a} outage in {svc}",
        ),
        (
            "For {svc} we agreed to move the {a} {b} job to run every {num} minutes.",
            "how often does the {a} {b} job run for {svc} now?",
        ),
        (
            "The {a} migration for {svc} is blocked until the {b} review lands.",
            "Why is the {a} migration for {svc} blocked?",
        ),
    ]
    for i in range(n):
        fact, question = facts[i % len(facts)]
        a, b = rng.choice(_TECH[:120]), rng.choice(_GENERAL[60:300])
        svc, num = rng.choice(services), rng.randrange(5, 300)
        fmt = {"a": a, "b": b, "svc": svc, "num": num}
        text = fact.format(**fmt)
        plants.append(Plant("question", question.format(**fmt), text, text))

    # phrase: three words that rarely meet, quoted.
    for _ in range(n):
        phrase = " ".join(
            (rng.choice(_GENERAL[300:]), rng.choice(_TECH[60:]), rng.choice(_GENERAL[:300]))
        )
        text = f"The logs show a {phrase} right after the restart."
        plants.append(Plant("phrase", f'"{phrase}"', text, phrase))

    # prefix: half of coined identifiers, half of vocabulary words (which expand widely).
    coined = _coined_names(rng, n // 2, taken)
    for name in coined:
        ident = f"{name}_{rng.choice(('sync', 'handler', 'client', 'cache'))}"
        text = f"Renamed the helper to {ident} in {rng.choice(_DIRS)}/{name}.py."
        plants.append(Plant("prefix", name[:5] + "*", text, ident))
    long_words = [w for w in _TECH if len(w) >= 7 and w.isalpha()]
    for w in rng.sample(long_words, n - len(coined)):
        stem = w[: rng.choice((4, 5, 6))]
        text = f"Then I looked at the {w} setup one more time."
        plants.append(Plant("prefix", stem + "*", text, w))

    # boolean: AND, OR, NOT and a mix.
    for i in range(n):
        a, b, c = rng.sample(_CONTENT[150:1200], 3)
        form = i % 4
        if form == 0:
            query = f"{a} AND {b}"
        elif form == 1:
            query = f"{a} OR {b}"
        elif form == 2:
            query = f"{a} NOT {c}"
        else:
            query = f"{a} AND {b} NOT {c}"
        text = f"Both {a} and {b} showed up in the trace from {rng.choice(services)}."
        plants.append(Plant("boolean", query, text, f"Both {a} and {b}"))

    # cjk3: Chinese terms of three or more characters (compounds of common words).
    zh2 = [w for w in _ZH_WORDS if len(w) == 2]
    zh3: list[str] = []
    for w in _ZH_WORDS:
        if len(w) >= 3:
            zh3.append(w)
    while len(zh3) < n:
        term = rng.choice(zh2[8:120]) + rng.choice(zh2[8:120])
        if term not in zh3:
            zh3.append(term)
    for term in zh3[:n]:
        text = f"昨天{term}出了点问题，今天需要再检查一下。"
        plants.append(Plant("cjk3", term, text, term))

    # cjk2: two-character words, frequent to rare.
    step = max(1, len(zh2) // n)
    for term in zh2[::step][:n]:
        text = f"关于{term}的事情我们明天再讨论。"
        plants.append(Plant("cjk2", term, text, term))

    # glued: a Latin code name written inside Chinese text without spaces.
    templates = ("修改{x}服务端的配置", "把{x}的缓存清掉", "{x}接口又超时了", "先重启{x}再看日志")
    for i, name in enumerate(["youer", *_coined_names(rng, n - 1, taken)]):
        glued = templates[i % len(templates)].format(x=name)
        text = f"{glued}，麻烦确认一下。"
        plants.append(Plant("glued", name, text, glued))
    return plants


PLANTS: list[Plant] = _build_plants(SEED)


def queries(seed: int = SEED) -> dict[str, list[str]]:
    """The benchmark queries, by class, in a fixed order (the same at every corpus size)."""
    plants = PLANTS if seed == SEED else _build_plants(seed)
    out: dict[str, list[str]] = {c: [] for c in QUERY_CLASSES}
    for p in plants:
        out[p.query_class].append(p.query)
    return out


# Pinyin input-method slips of the corpus's Chinese words: the word as typed (another
# character, or word, of the same sound) and the word meant.
ZH_SLIPS = (
    ("数剧", "数据"),
    ("配制", "配置"),
    ("部属", "部署"),
    ("日至", "日志"),
    ("接扣", "接口"),
    ("权线", "权限"),
    ("超市", "超时"),
    ("对列", "队列"),
    ("条度", "调度"),
    ("镜象", "镜像"),
    ("锁引", "索引"),
    ("前移", "迁移"),
    ("被份", "备份"),
    ("同部", "同步"),
    ("正书", "证书"),
    ("密要", "密钥"),
    ("令排", "令牌"),
    ("回棍", "回滚"),
    ("灰渡", "灰度"),
    ("延尺", "延迟"),
)


def zh_questions(seed: int = SEED) -> list[str]:
    """Chinese questions of 12-20 characters about the corpus's words, as a user types
    them: 20 as written and 20 with one of :data:`ZH_SLIPS` (the word typed with a
    homophone), in a fixed order. Not a class of :func:`queries` (the store benchmark's
    classes stay as they are); the A/B harnesses ask them as ``zhq``."""
    rng = random.Random(seed + 1)
    zh2 = [w for w in _ZH_WORDS if len(w) == 2][8:120]
    frames = ("上次{a}的{b}是怎么处理的？", "{a}和{b}的问题解决了吗", "我们讨论过{a}{b}吗？")
    out = []
    for i in range(40):
        typed, meant = ZH_SLIPS[i % len(ZH_SLIPS)]
        word = typed if i >= 20 else meant
        other = rng.choice(zh2)
        frame = frames[i % len(frames)]
        out.append(frame.format(a=word, b=other) if i % 2 else frame.format(a=other, b=word))
    return out


# ------------------------------------------------------------------------ conversation
@dataclass
class Session:
    """One conversation: its id, source, start time and turns of message dicts."""

    id: str
    source: str
    started_at: float
    chinese: bool
    turns: list[list[Message]] = field(default_factory=list)

    @property
    def messages(self) -> list[Message]:
        return [m for turn in self.turns for m in turn]


class _Writer:
    """Text generators sharing one seeded RNG."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.services = [f"{p}-{s}" for p in _SERVICE_PARTS for s in _SERVICE_SUFFIX]

    def words(self, k: int) -> list[str]:
        return self.rng.choices(VOCABULARY, cum_weights=_VOCAB_CUM, k=k)

    def content_word(self) -> str:
        return self.rng.choices(_CONTENT, cum_weights=_CONTENT_CUM, k=1)[0]

    def sentence(self, lo: int = 6, hi: int = 18) -> str:
        words = self.words(self.rng.randint(lo, hi))
        words[0] = words[0].capitalize()
        return " ".join(words) + self.rng.choice((".", ".", ".", "?", "!", ":"))

    def path(self) -> str:
        rng = self.rng
        parts = [rng.choice(_DIRS)] + [self.content_word() for _ in range(rng.randint(0, 2))]
        name = "_".join(self.content_word() for _ in range(rng.randint(1, 2)))
        return "/".join(parts) + f"/{name}.{rng.choice(_EXTS)}"

    def ident(self) -> str:
        return "_".join(self.content_word() for _ in range(self.rng.randint(2, 3)))

    def user(self) -> str:
        rng = self.rng
        w, p, svc = self.content_word(), self.path(), rng.choice(self.services)
        lead = rng.choice(
            (
                f"Can you look at {p}? The {w} part fails since this morning.",
                f"Why does {svc} return {rng.choice((500, 502, 503, 404, 429))} on {w}?",
                f"Please {rng.choice(('fix', 'refactor', 'review', 'test'))} {self.ident()} "
                f"in {p}.",
                f"I want to {rng.choice(('deploy', 'rollback', 'restart'))} {svc} today.",
                f"What is the status of the {w} {self.content_word()} work?",
            )
        )
        extra = " ".join(self.sentence() for _ in range(rng.choice((0, 0, 1, 1, 2, 3))))
        return f"{lead} {extra}".strip()

    def assistant(self) -> str:
        rng = self.rng
        n = rng.choice((1, 2, 2, 3, 3, 4, 5, 7))
        text = " ".join(self.sentence(8, 24) for _ in range(n))
        if rng.random() < 0.3:
            text += f" I changed `{self.ident()}` in {self.path()}."
        return text

    def tool_call(self, call_no: int) -> tuple[str, list[dict[str, Any]]]:
        rng = self.rng
        tool = rng.choice(_TOOLS)
        if tool == "terminal":
            cmd = rng.choice(
                (
                    f"pytest -q tests/test_{self.content_word()}.py -k {self.content_word()}",
                    f"git log --oneline -n {rng.randint(3, 30)} -- {self.path()}",
                    f"kubectl logs deploy/{rng.choice(self.services)} "
                    f"--tail={rng.randint(20, 500)}",
                    f"grep -rn {self.content_word()} {rng.choice(_DIRS)}/",
                    f"docker compose restart {rng.choice(self.services)}",
                )
            )
            args: dict[str, Any] = {"command": cmd, "timeout": rng.choice((30, 60, 120))}
        elif tool in ("read_file", "write_file"):
            args = {"path": self.path()}
            if tool == "write_file":
                args["content"] = f"def {self.ident()}():\n    return {rng.randint(0, 99)}\n"
        elif tool == "search_files":
            args = {"pattern": self.ident(), "path": rng.choice(_DIRS)}
        elif tool == "patch":
            args = {"path": self.path(), "old": self.ident(), "new": self.ident()}
        else:
            args = {"query": " ".join(self.words(rng.randint(3, 7)))}
        call = {
            "id": f"call_{rng.getrandbits(48):012x}",
            "type": "function",
            "function": {"name": tool, "arguments": json.dumps(args)},
        }
        return tool, [call]

    def tool_result(self, tool: str) -> str:
        rng = self.rng
        lines: list[str] = []
        for _ in range(rng.choice((1, 2, 3, 4, 6, 8, 12))):
            kind = rng.random()
            if tool == "read_file" or kind < 0.2:
                lines.append(f"    {self.ident()} = {self.content_word()}({rng.randint(0, 999)})")
            elif kind < 0.55:
                lines.append(
                    f"2026-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d} "
                    f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d} "
                    f"{rng.choice(_LEVELS)} [{rng.choice(self.services)}] "
                    f"{' '.join(self.words(rng.randint(3, 9)))} "
                    f"request_id={rng.getrandbits(32):08x} took {rng.randint(1, 4000)}ms"
                )
            elif kind < 0.8:
                lines.append(f"{self.path()}:{rng.randint(1, 900)}: {self.sentence(3, 9)}")
            else:
                lines.append(f"$ {self.ident()} --{self.content_word()} {self.path()}")
        return "\n".join(lines)

    def chinese(self) -> str:
        rng = self.rng
        out: list[str] = []
        for _ in range(rng.randint(1, 3)):
            k = rng.randint(4, 14)
            words = rng.choices(_ZH_WORDS, cum_weights=_ZH_CUM, k=k)
            clause: list[str] = []
            for w in words:
                clause.append(w)
                if rng.random() < 0.35:
                    clause.append(rng.choice(_ZH_GLUE))
            if rng.random() < 0.3:
                # Latin glued to CJK, as Chinese speakers write tool and service names.
                at = rng.randrange(len(clause) + 1)
                clause.insert(at, rng.choice((self.content_word(), rng.choice(_TECH))))
            out.append("".join(clause) + rng.choice(("。", "，", "？", "！")))
        return "".join(out)


def _session_size(rng: random.Random) -> int:
    # Log-normal-ish: most sessions are a few dozen messages, some run to hundreds.
    size = int(rng.lognormvariate(4.1, 0.7))
    return max(SESSION_MIN, min(SESSION_MAX, size))


def generate(n: int, seed: int = SEED) -> Iterator[Session]:
    """Yield sessions holding exactly ``n`` messages in total, deterministically."""
    if n <= 0:
        return
    rng = random.Random(seed)
    writer = _Writer(rng)
    plant_rng = random.Random(seed * 31 + 7)
    plants = PLANTS if seed == SEED else _build_plants(seed)
    copies = max(1, n // PLANT_EVERY)
    schedule: dict[int, list[Plant]] = {}
    for plant in plants:
        for _ in range(copies):
            schedule.setdefault(plant_rng.randrange(n), []).append(plant)
    pending: list[Plant] = []
    produced = 0
    clock = 1_767_225_600.0  # 2026-01-01T00:00:00Z
    number = 0
    while produced < n:
        size = min(_session_size(rng), n - produced)
        number += 1
        chinese = rng.random() < 0.21
        source = rng.choice(("cli", "cli", "cli", "telegram", "discord", "mcp"))
        session = Session(f"s{number:07d}", source, clock, chinese)
        left = size
        while left > 0:
            turn: list[Message] = []
            clock += rng.uniform(5, 600)
            user = writer.chinese() if chinese else writer.user()
            turn.append(_msg("user", user, clock))
            rounds = rng.choices((0, 1, 2, 3), weights=(25, 35, 25, 15))[0]
            for call_no in range(rounds):
                if len(turn) + 3 > left:
                    break
                tool, calls = writer.tool_call(call_no)
                clock += rng.uniform(1, 20)
                text = None if rng.random() < 0.6 else writer.sentence(5, 12)
                turn.append(_msg("assistant", text, clock, tool_calls=calls))
                clock += rng.uniform(0.1, 30)
                turn.append(_msg("tool", writer.tool_result(tool), clock, tool_name=tool))
            if len(turn) < left:
                clock += rng.uniform(1, 60)
                answer = writer.chinese() if chinese else writer.assistant()
                turn.append(_msg("assistant", answer, clock))
            turn = turn[:left]
            for m in turn:
                pending.extend(schedule.pop(produced, ()))
                produced += 1
                if pending and m["content"] is not None:
                    m["content"] += "\n" + "\n".join(p.text for p in pending)
                    pending = []
            left -= len(turn)
            session.turns.append(turn)
        if pending:
            # The corpus ended on a message without text: put the rest on its last text.
            last = next(m for t in reversed(session.turns) for m in reversed(t) if m["content"])
            last["content"] += "\n" + "\n".join(p.text for p in pending)
            pending = []
        clock += rng.uniform(600, 86_400)
        yield session


def _msg(
    role: str,
    content: str | None,
    ts: float,
    *,
    tool_name: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
) -> Message:
    return {
        "role": role,
        "content": content,
        "tool_name": tool_name,
        "tool_calls": tool_calls,
        "timestamp": round(ts, 3),
    }


def indexed_text(message: Message) -> str:
    """The text a full-text index sees for a message: content, tool name, arguments."""
    calls = json.dumps(message["tool_calls"]) if message["tool_calls"] else ""
    return " ".join((message["content"] or "", message["tool_name"] or "", calls))


class Stats:
    """Summary statistics of a corpus, accumulated one session at a time."""

    DISTINCT_SAMPLE = 20_000  # distinct tokens are counted over the first messages only

    def __init__(self) -> None:
        self.messages = self.sessions = self.chars = self.chinese = self.tools = 0
        self.sizes: list[int] = []
        self._tokens: dict[str, None] = {}

    def add(self, session: Session) -> None:
        self.sessions += 1
        msgs = session.messages
        self.sizes.append(len(msgs))
        for m in msgs:
            self.messages += 1
            self.chars += len(indexed_text(m))
            self.tools += m["role"] == "tool"
            text = m["content"] or ""
            if any("\u4e00" <= ch <= "\u9fff" for ch in text):
                self.chinese += 1
            if self.messages <= self.DISTINCT_SAMPLE:
                self._tokens.update(dict.fromkeys(text.split()))

    def as_dict(self) -> dict[str, Any]:
        sizes = sorted(self.sizes)
        n = max(1, self.messages)
        return {
            "messages": self.messages,
            "sessions": self.sessions,
            "session_size_min": sizes[0] if sizes else 0,
            "session_size_median": sizes[len(sizes) // 2] if sizes else 0,
            "session_size_max": sizes[-1] if sizes else 0,
            "mean_indexed_chars": round(self.chars / n, 1),
            "chinese_share": round(self.chinese / n, 3),
            "tool_result_share": round(self.tools / n, 3),
            "vocabulary_size": len(VOCABULARY),
            "distinct_tokens_first_20k_messages": len(self._tokens),
        }


def describe(sessions: Iterable[Session]) -> dict[str, Any]:
    """Summary statistics of a generated corpus (for the results file)."""
    stats = Stats()
    for s in sessions:
        stats.add(s)
    return stats.as_dict()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Print a sample of the benchmark corpus.")
    parser.add_argument("-n", type=int, default=40, help="messages to generate")
    parser.add_argument("--stats", action="store_true", help="print statistics, not messages")
    args = parser.parse_args(argv)
    if args.stats:
        print(json.dumps(describe(generate(args.n)), indent=2, ensure_ascii=False))
    else:
        for s in generate(args.n):
            for m in s.messages:
                print(json.dumps({"session": s.id, **m}, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
