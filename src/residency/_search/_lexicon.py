"""Words of other languages for the words tools are named with: a small query-side glossary.

Tool definitions are written in English, and the packaged embedding model reads English only, so
a task asked in German or Japanese meets a tool only through what the two share: product names,
identifiers, numbers. This glossary adds the rest for the words that matter most: the generic
words among the 200 most frequent in tool names (over the dev corpus and the public StableToolBench
catalog together: ``get``, ``list``, ``search``, ``create``, ``file``, ``page``, ``user`` ...),
each with its usual forms in German, Spanish, French, Portuguese, Chinese and Japanese. It was
written from that list of words, not from queries.

How a query meets it (:func:`glosses`): a word of a Latin-script language matches an entry that
is a prefix of it (entries are stems: ``losch`` for ``lösche``, ``löschen``, ``gelöscht`` is not
one) of four letters or more, or equals it (entries ending in ``=``, for short words);
accents are folded first, as the index folds them. In Chinese and Japanese an entry matches
where it occurs in the text (2 to 8 characters). A match adds the English words of the entry
to the query's terms, beside the query's own words.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Mapping, Sequence

__all__ = ["foreign", "glosses", "lexicon"]

# English | German | Spanish | French | Portuguese | Chinese | Japanese (an indented line goes on
# with the row above). Latin-script forms are stems matched as prefixes (4 letters at least) or,
# ending in "=", whole words.
_TABLE = """
get | zeig anzeig abruf hole= holen= hol= | muestr mostr obten obtien |
    montr affich obten obtien recuper | mostr exib obten obter= | 获取 查看 显示 展示 | 取得 表示 見せ
list | liste auflist | lista listar enumer | liste lister enumer | liste listar lista |
    列出 列表 清单 | 一覧 リスト 列挙
search | such durchsuch | busc | cherch recherch | procur pesquis busc |
    搜索 查找 搜一下 | 検索 探し 探す 調べ
find | find | encuentr encontr | trouv | encontr ache= achar= | 找到 查找 寻找 | 見つけ
create | erstell anleg | crea | cree= creer= creez= | crie= criar= cria= | 创建 新建 建立 | 作成 作って 新規
update | aktualisier | actualiz | actualis | atualiz | 更新 | 更新
edit | bearbeit | edit | edit modifi | edit | 编辑 修改 | 編集
set | setz festleg | establec configur pon= poner= | defini regl | defin configur | 设置 设定 | 設定
add | hinzufug fuge= fugen= | agreg anad | ajout | adicion acrescent | 添加 加上 增加 | 追加 加え
delete | losch | elimin borr | supprim effac | exclu apag delet | 删除 删掉 | 削除 消して 消す
remove | entfern | quita | retir enlev | remov tire= tirar= | 移除 去掉 | 外し 取り除
read | lies= lese= lesen= | lee= leer= lea= | lis= lire= lisez= | leia= ler= |
    读取 阅读 读一下 | 読んで 読み 読む
write | schreib | escrib | ecri | escrev | 写入 | 書き込 書いて
download | herunterlad | descarg | telecharg | baix | 下载 | ダウンロード
upload | hochlad | sub= subir= subir= | televers | carreg envie= enviar= | 上传 | アップロード
move | verschieb | muev mover= | deplac | mova= mover= | 移到 移动 | 移動
copy | kopier | copi | copi | copi | 复制 拷贝 | コピー 複製
convert | umwand wandl konvertier | convert convier | convert | convert | 转换 转成 转为 | 変換
export | exportier | export | export | export | 导出 | エクスポート 書き出
import | importier | import | import | import | 导入 | インポート 取り込
generate | generier erzeug | gener | gener | gere= gerar= | 生成 | 生成
check | pruf uberpruf | comprueb verific | verifi | verifiq verific | 检查 | 確認 チェック
describe | beschreib | describ | decri | descrev | 描述 | 説明
reply | antwort | respond respuest | repond repons | respond respost | 回复 答复 | 返信 返事
merge | zusammenfuhr | fusion | fusion | mescl | 合并 | マージ
assign | zuweis zugewies | asign | assign attribu | atribu | 分配 指派 | 割り当
insert | einfug | insert | insere= inserer= | insir | 插入 | 挿入
start | starte= starten= | inici arranc | demarr lanc | inici | 启动 开始 | 開始 起動
stop | stopp beend anhalt | deten | arret | pare= parar= interromp | 停止 | 停止
count | zahle= zahlen= | cont= cuent | compt | cont= | 统计 计数 数量 | 件数 数え
post | poste= posten= veroffentlich | public | publi | public | 发布 发帖 | 投稿
track | verfolg | rastre segu | suiv | rastre | 跟踪 追踪 | 追跡
explain | erklar | explic | expliq | expliq | 解释 | 説明
issue | ticket problem | incidenc problema | probleme ticket | problema chamado |
    问题 工单 | 課題 チケット 問題
request | anfrag anford | solicitud peticion | demand requet | solicitac pedido |
    请求 申请 | リクエスト 依頼
page | seite | pagina | page | pagina | 页面 网页 | ページ
comment | kommentar | comentar | commentair | comentar | 评论 注释 | コメント
user | benutzer nutzer | usuario | utilisateur | usuario | 用户 | ユーザ
username | benutzernam | nombredeusuario | identifiant | nomedeusuario | 用户名 | ユーザー名
code | quellcod | codig | cod= | codig | 代码 | コード
repository | repositor | repositor | depot= | repositor | 仓库 代码库 | リポジトリ レポジトリ
review | uberpruf begutacht | revision= | relectur | revisao= | 审查 评审 审核 | レビュー
project | projekt | proyect | projet | projet | 项目 | プロジェクト
file | datei | archivo= archivos= fichero | fichier | arquivo | 文件 | ファイル
directory | ordner verzeichnis | carpeta directori | dossier repertoir |
    pasta= pastas= diretori | 文件夹 目录 | フォルダ ディレクトリ
details | detail einzelheit | detall | detail | detalh | 详情 详细 | 詳細
information | informat | informac | informat | informac | 信息 资料 | 情報
name | name= namen= | nombre | nom= noms= | nome | 名称 名字 | 名前
title | titel | titul | titre | titul | 标题 | タイトル 件名
data | daten | datos= dato= | donnee | dados= | 数据 | データ
sheet | tabellenblatt blatt | hoja= hojas= | feuill | planilh | 工作表 表格 | シート
table | tabelle | tabla= tablas= | tableau | tabela | 表格 | テーブル
workbook | arbeitsmapp | libro= | classeur | pastadetrabalho | 工作簿 | ブック
cells | zelle | celda | cellul | celul | 单元格 | セル
rows | zeile | fila= filas= | ligne | linha | 行 | 行
columns | spalte | column | colonn | colun | 列 | 列
image | bild= bilder= | imagen | image | imag | 图片 图像 | 画像
video | video | video | video | video | 视频 | 動画 ビデオ
media | medien | medio= medios= | media | midia | 媒体 | メディア
news | neuigkeit | noticia | actualit nouvell | noticia | 新闻 | ニュース
chart | diagramm | grafic | graphiq | grafic | 图表 | グラフ チャート
link | verknupf link | enlac vincul | lien= liens= | link | 链接 | リンク
url | adress | direccion | adress | endereco | 网址 | アドレス
email | mail | correo | courri | correio | 邮件 邮箱 | メール
product | produkt | product | produit | produt | 产品 商品 | 製品 商品
price | preis | precio | prix= | preco | 价格 | 価格 値段
company | firma unternehm | empresa compan | entrepris societe | empresa companhia | 公司 企业 | 会社 企業
status | status zustand | estado | statut etat= | estado situac | 状态 | 状態 ステータス
state | zustand | estado | etat= | estado | 状态 | 状態
history | verlauf histori | histori | histori | histori | 历史 | 履歴
logs | protokoll | registro | journal | registro | 日志 | ログ
alerts | warnung alarm | alerta aviso | alert | alerta aviso | 警报 告警 警告 | アラート 警告
notification | benachrichtig | notificac | notificat | notificac | 通知 | 通知
security | sicherheit | segurid | securit | seguranc | 安全 | セキュリティ
process | prozess | proceso | processus | process | 进程 | プロセス
branch | zweig | rama= ramas= | branche | ramo= | 分支 | ブランチ
thread | thread | hilo= | fil= | thread | 帖子 线程 | スレッド
discussion | diskussion | discusion | discussion | discussa | 讨论 | ディスカッション 議論
attachment | anhang anhange | adjunto | jointe | anexo | 附件 | 添付
label | etikett markier | etiquet | etiquet | rotul etiquet | 标签 | ラベル
tag | schlagwort | etiquet | etiquet balis | etiquet | 标签 | タグ
type | typ= typen= | tipo= tipos= | type | tipo= tipos= | 类型 | 種類 タイプ
category | kategori | categori | categori | categori | 类别 分类 | カテゴリ
profile | profil | perfil | profil | perfil | 资料 个人资料 | プロフィール
quote | zitat kurs | cotizac | cotat citat | cotac citac | 报价 | 相場 見積
stats | statisti | estadistic | statistiq | estatistic | 统计 | 統計
random | zufall | aleatori | aleatoir hasard | aleatori | 随机 | ランダム
free | kostenlos frei= | gratis grati | gratuit libre | gratis gratuit | 免费 | 無料
top | beste= besten= | mejor | meilleur | melhor | 最好 排行 | 人気 トップ
latest | neuest letzt aktuell | ultim recient | dernier recent | ultim recent | 最新 最近 | 最新 最近
pending | ausstehend | pendient | attente | pendent | 待处理 | 保留
channel | kanal | canal | canal chain | canal | 频道 | チャンネル
number | nummer anzahl | numero | numero nombre= | numero | 号码 编号 | 番号
artist | kunstler | artista | artist | artista | 艺术家 歌手 | アーティスト
stock | aktie | accion= acciones= | action= actions= | aca= acoes= | 股票 | 株
country | land= lander | pais= paises= | pays= | pais= paises= | 国家 | 国
city | stadt stadte | ciudad | ville= villes= | cidade | 城市 | 都市
language | sprach | idioma lengua | langu | idioma lingua | 语言 | 言語
version | version | version | version | versao versoes | 版本 | バージョン
release | veroffentlichung | lanzamiento | publicat | lancament | 发布 发行 | リリース
content | inhalt | contenid | contenu | conteud | 内容 | 内容 中身
service | dienst | servicio | servic | servic | 服务 | サービス
tree | baum | arbol | arbre | arvore | 树 目录树 | ツリー
format | format | format | format | format | 格式 | 書式 フォーマット
day | tag= tage= | dia= dias= | jour= jours= | dia= dias= | 日 天 | 日
current | aktuell derzeit | actual= | actuel | atual= | 当前 现在 | 現在 今の
time | zeit uhrzeit uhr= spat= | hora= horas= tiempo | heure | hora= horario | 时间 几点 | 時間 時刻 何時
template | vorlag | plantill | modele | model | 模板 | テンプレート
form | formular | formulari | formulair | formulari | 表单 | フォーム
space | bereich platz | espacio | espace | espaco | 空间 | スペース 容量
topic | thema themen | tema= temas= | sujet | tema= temas= assunto | 主题 话题 | トピック 話題
team | team mitglied | equipo miembro | equip membre | equip membro | 团队 成员 | チーム メンバー
port | hafen= | puerto | port= | porta= | 端口 | ポート
config | konfigur einstell | configur ajuste | configur parametr | configur | 配置 设置 | 設定 構成
secret | geheim schlussel | secreto clave= | secret cle= | segredo chave= | 密钥 秘密 | シークレット 秘密
events | ereignis | evento | evenement | evento | 事件 活动 | イベント
note | notiz | nota= notas= | note= notes= | nota= notas= | 笔记 备注 | ノート メモ
graph | graph | grafo | graphe | grafo | 图谱 | グラフ
knowledge | wissen | conocimiento | connaissanc | conhecimento | 知识 | 知識
board | board tafel | tablero | tableau | quadro | 看板 | ボード
""".strip()

_COLUMNS = ("en", "de", "es", "fr", "pt", "zh", "ja")
_MIN_PREFIX = 4
_MAX_CJK = 8

# Function words that tell a Latin-script query's language: the glossary reads a query whose
# words are more often these than English ones (so an English query is never reread, and
# ``important`` never meets the stem ``import``). Words two of the languages share count for
# both; words English shares with one of them (``in``, ``a``, ``no``, ``me``) count for none.
_FUNCTION_WORDS = frozenset(
    """
    der die das den dem des ein eine einen einem einer und ist mir mich mein meine meinen ich du
    dir dein deine nicht mit von fur auf aus bei nach wie was wer welche welcher wo ob im zum zur
    el la los las lo un una unos unas del al y es que qui mi mis tu su sus con por para sin cual
    cuales como donde quien esta este esto todo todos todas ya hay
    le les une des du et est mon ma mes ton ta tes ce cette ces dans sur pour avec sans quel quelle
    quels quelles comment ou moi toi il elle nous vous qu
    os da das dos na nas nos num numa um uma uns umas em meu minha meus minhas seu sua voce com sem
    qual quais onde quem isso isto tudo todos todas ja
    """.split()  # noqa: SIM905 (a word list reads better as text)
)
_ENGLISH_WORDS = frozenset(
    """
    the of and to is are was were be been my your our their it its this that these those what which
    who whom how why where when for with from by at on into out up all any some there here have has
    had do does did can could would should will not
    """.split()  # noqa: SIM905
)


def _fold(word: str) -> str:
    """Case-folded, accents removed (the index folds Latin letters so too, see ``_text``)."""
    text = unicodedata.normalize("NFD", word.casefold())
    return "".join(ch for ch in text if not unicodedata.combining(ch))


Glossary = tuple[Mapping[str, tuple[str, ...]], Mapping[str, tuple[str, ...]], Mapping[str, tuple[str, ...]]]


@functools.cache
def lexicon() -> Glossary:
    """(Latin stems, Latin whole words, CJK words), each -> the English words they gloss."""
    stems: dict[str, tuple[str, ...]] = {}
    exact: dict[str, tuple[str, ...]] = {}
    cjk: dict[str, tuple[str, ...]] = {}
    for line in _TABLE.replace("\n ", " ").splitlines():
        cells = [cell.split() for cell in line.split("|")]
        if len(cells) != len(_COLUMNS) or not all(cells):
            raise ValueError(f"a glossary row needs a form in each of {len(_COLUMNS)} columns: {line!r}")
        english = tuple(cells[0])
        for column, forms in zip(_COLUMNS[1:], cells[1:], strict=True):
            for form in forms:
                if column in ("zh", "ja"):
                    table, key = cjk, unicodedata.normalize("NFKC", form)
                elif form.endswith("="):
                    table, key = exact, _fold(form[:-1])
                else:
                    table, key = stems, _fold(form)
                    if len(key) < _MIN_PREFIX:
                        raise ValueError(f"a glossary stem under {_MIN_PREFIX} letters: {form!r}")
                # A form two entries share glosses both (``estado``: status and state).
                table[key] = tuple(dict.fromkeys(table.get(key, ()) + english))
    return stems, exact, cjk


def _latin(word: str) -> tuple[str, ...]:
    stems, exact, _ = lexicon()
    found = exact.get(word)
    if found:
        return found
    for end in range(len(word), _MIN_PREFIX - 1, -1):
        found = stems.get(word[:end])
        if found:
            return found
    return ()


def _unspaced(run: str) -> list[str]:
    """Longest entries first where two overlap (``文件夹`` is a folder, not a file)."""
    _, _, cjk = lexicon()
    out: list[str] = []
    at = 0
    while at < len(run):
        for size in range(min(_MAX_CJK, len(run) - at), 1, -1):
            found = cjk.get(run[at : at + size])
            if found:
                out += found
                at += size
                break
        else:
            at += 1
    return out


def foreign(words: Sequence[str], *, accented: bool = False) -> bool:
    """Whether a Latin-script query's (folded, lower-case) words read as German, Spanish,
    French or Portuguese rather than English: more of its function words are theirs, or as
    many (none, often, in a short query) and ``accented`` (it has a letter with an accent)."""
    theirs = sum(w in _FUNCTION_WORDS for w in words)
    english = sum(w in _ENGLISH_WORDS for w in words)
    return theirs > english or (theirs == english and accented)


def glosses(query: str) -> list[str]:
    """The English words of the glossary that ``query``'s words of other languages say, in
    order (``beende den Prozess`` -> ``stop``, ``process``); none for an English query."""
    return list(_glosses(query))


@functools.lru_cache(maxsize=64)
def _glosses(query: str) -> tuple[str, ...]:
    # Cached: one search asks twice (its BM25 terms and the text it embeds).
    text = unicodedata.normalize("NFKC", query)
    out: list[str] = []
    latin: list[str] = []
    accented = False
    for run in _RUN.findall(text):
        if _CJK.search(run):
            out += _unspaced(run)
        else:
            word = _fold(run)
            accented = accented or word != run.casefold()
            latin.append(word)
    if foreign(latin, accented=accented):
        for word in latin:
            out += _latin(word)
    return tuple(out)


_RUN = re.compile(r"[^\W_]+")
_CJK = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\U00020000-\U0003ffff]")
