// Sorts a table.sortable by the clicked header: cells marked class="num" as numbers, others as text
// (numeric-aware collation); "N/A" and empty cells stay last in either direction. Headers become
// buttons at load (keyboard and screen readers); the sorted header carries aria-sort.
(function(){
var text=new Intl.Collator("en",{numeric:true,sensitivity:"base"});
function key(td){
  var s=td?td.textContent.trim():"";
  if(s===""||s==="N/A")return null;
  if(!td.classList.contains("num"))return s;
  var v=s==="inf"?Infinity:s==="-inf"?-Infinity:Number(s);
  return isNaN(v)?null:v;
}
function order(a,b){
  if(typeof a==="number"&&typeof b==="number")return a<b?-1:a>b?1:0;
  if(typeof a==="number")return -1;
  if(typeof b==="number")return 1;
  return text.compare(a,b);
}
function sort(th){
  var table=th.closest("table"),body=table.tBodies[0],col=th.cellIndex;
  var dir=th.getAttribute("aria-sort")==="ascending"?-1:1;
  var rows=Array.prototype.map.call(body.rows,function(tr,i){return [key(tr.cells[col]),i,tr];});
  rows.sort(function(a,b){
    if(a[0]===null||b[0]===null)return (a[0]===null)-(b[0]===null)||a[1]-b[1];
    return dir*order(a[0],b[0])||a[1]-b[1];
  });
  var heads=table.tHead.rows[0].cells;
  for(var j=0;j<heads.length;j++)heads[j].removeAttribute("aria-sort");
  th.setAttribute("aria-sort",dir>0?"ascending":"descending");
  var frag=document.createDocumentFragment();
  rows.forEach(function(r){frag.appendChild(r[2]);});
  body.appendChild(frag);
}
document.querySelectorAll("table.sortable>thead>tr>th").forEach(function(th){
  var b=document.createElement("button");
  b.type="button";
  b.title="Sort by this column";
  while(th.firstChild)b.appendChild(th.firstChild);
  th.appendChild(b);
});
document.addEventListener("click",function(e){
  var th=e.target.closest&&e.target.closest("table.sortable>thead>tr>th");
  if(th)sort(th);
});
})();
